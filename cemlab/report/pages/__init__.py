"""The report's pages: ``build`` (a sweep's report put together), ``writers`` (the files it
writes: figures, CSV, the claims' tables), ``render`` (the HTML/Markdown page) and ``ladder_page``
(the across-the-ladder report)."""
