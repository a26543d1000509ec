"""``python -m cemlab.bench WHAT [options]``: the same as ``cemlab bench WHAT [options]``."""

import argparse
import sys

from cemlab.bench.cli import add_arguments, run

parser = argparse.ArgumentParser(prog="python -m cemlab.bench", description=__doc__)
add_arguments(parser)
sys.exit(run(parser.parse_args()))
