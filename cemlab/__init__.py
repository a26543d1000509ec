"""cemlab: Transformer layers derived from Causal Energy Minimization, their training, sweeps,
tracking and the paper's report. ``cemlab.__version__`` (``cemlab.version``) is read when first
used (PEP 562), so that importing cemlab does not read the package metadata."""

from cemlab.lazy import lazy_exports
from cemlab.numerics import export_requested

export_requested()  # $CEMLAB_NUMERICS: the math libraries' variables before any torch kernel (cemlab.numerics)

__getattr__, __dir__ = lazy_exports(__name__, {".version": ("__version__",)})
