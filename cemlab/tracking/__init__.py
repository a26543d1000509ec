"""MLflow: store location, run naming, parent/child runs, a local tracking server."""
