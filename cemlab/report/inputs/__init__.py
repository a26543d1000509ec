"""What a report reads: ``grids`` (the sweep files as the report reads them) and ``table`` (a
sweep's grid joined with the runs in the store, aggregated over seeds)."""
