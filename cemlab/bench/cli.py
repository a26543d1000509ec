"""``cemlab bench WHAT``: benchmarks that print numbers (never timed tests).

- ``layers``: forward+backward tokens/s and memory of Llama, CEM variants and Hugging Face Llama.
- ``kernels``: CEM attention's reference and flex paths against Llama, compiled and not (GPU table).
- ``train``: Lightning training step vs a bare PyTorch loop; data start-up from the token cache.
- ``data``: first-run and cached start-up of the data pipeline.
- ``evalnoise``: standard error of the test and validation metrics against evaluation batches.
"""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "layers": "cemlab.bench.layers",
    "kernels": "cemlab.bench.kernels",
    "train": "cemlab.bench.train",
    "data": "cemlab.bench.data",
    "prepare": "cemlab.bench.prepare",
    "evalnoise": "cemlab.bench.evalnoise",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", nargs="?", default="layers", choices=list(BENCHES), help="which benchmark (default: layers)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="options of that benchmark (see cemlab bench WHAT --help)")


def run(args) -> int:
    module = importlib.import_module(BENCHES[args.what])
    return int(module.main(args.rest) or 0)
