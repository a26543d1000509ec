"""``cemlab reproduce``: rerun a sample of a committed report's trials and judge them against the
stated guarantee (docs/reproducibility.md). :mod:`cemlab.reproduce.trials` reads, chooses, rebuilds,
reruns and judges the trials; :mod:`cemlab.reproduce.cli` is the command."""
