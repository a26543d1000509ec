"""The Gaussian-process recursion study (paper Table 3): synthetic GP regression data and its config.

- ``GPConfig`` (``cemlab.gp.config``): kernel, sizes, noise, lengthscales, seed, and the regressor's
  latent width, layers, recursion steps T, step size and preconditioner.
- ``make_gp_data(cfg)``, or ``load_gp_data(cfg)`` through a disk cache (``cemlab.gp.data``): one
  function drawn from a GP prior (``rbf`` or the non-stationary ``gibbs`` kernel) at
  10-dimensional inputs, with noise, split train/val/test.
- The regressor itself is ``cemlab.models.gp.GPRegressor`` (pure PyTorch, the language models' CEM MLP).
"""

# The names are imported when first used (PEP 562), so that importing a light submodule (a config)
# does not load torch through this package.
from cemlab.lazy import lazy_exports

_EXPORTS = {".config": ("GPConfig",),
            ".data": ("GPData", "GPSamplingError", "GPSplit", "kernel_matrix", "load_gp_data", "make_gp_data",
                      "posterior_mean_rmse", "rmse")}
__all__ = [name for names in _EXPORTS.values() for name in names]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
