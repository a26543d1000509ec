"""What a report reads: ``grids`` (the sweep files as the report reads them), ``table`` (a sweep's
grid joined with the runs in the store, aggregated over seeds), ``seeded`` (the trials its looks
added) and ``context`` (``ReportContext``: all of it for one sweep at one scale)."""
