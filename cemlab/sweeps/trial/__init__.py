"""Running a trial, inside its Ray process: the job the driver hands it, its files on disk, its lock, what it reports to Tune, and the multi-worker (Ray Train) variant."""
