"""The sweep commands' argument parsing and handlers (``cemlab sweep``, ``plan``, ``data``, ``slurm``)."""
