"""The time limit of each test in the files a GPU session runs (tests/test_gpu_paths.py,
tests/test_attention_kernels.py; scripts/gpu-session.sh), so that a test that hangs there is
ended by the suite (pytest-timeout) and not by the machine's limit.

On a machine with a CUDA device: 120 s per test, so that both files stay within 5 minutes even
with one hung test, and the ``thread`` method, which ends the run even when the test is stuck in
C code where a signal never reaches Python, after printing every thread's stack (the diagnosis).
Without one: 600 s and the ``signal`` method (the test fails, the suite goes on), since a CPU
compile of the slowest test took over 2 minutes on the shared 2-core machine.
"""

from __future__ import annotations

import pytest
import torch

CUDA = torch.cuda.is_available()
#: Seconds per test.
GPU_FILE_TIMEOUT_S = 120 if CUDA else 600
gpu_file_timeout = pytest.mark.timeout(GPU_FILE_TIMEOUT_S, method="thread" if CUDA else "signal")
