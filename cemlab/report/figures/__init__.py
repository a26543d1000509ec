"""The report's figures: ``catalog`` (the figures by id), ``plotting`` (the shared figure kit),
``paper_figures`` (the paper's figures) with ``lr_optima`` (Fig. 3a's optima), ``run_figures``
(the figures every sweep's report tries) and ``ladder_figures`` (the across-the-ladder figures)."""
