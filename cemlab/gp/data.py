"""Synthetic regression data drawn from Gaussian-process priors (the paper's Table 3 study).

**Inputs.** ``x ~ Uniform([-1, 1]^D)``, i.i.d. over examples and coordinates, ``D = n_inputs``
(10 in the paper). A bounded box keeps the non-stationary lengthscale below within a known range.

**Kernels** (``sigma_f = signal_std``, ``|.|`` the Euclidean norm):

- ``rbf`` (stationary squared exponential)::

      k(x, x') = sigma_f^2 * exp(-|x - x'|^2 / (2 l^2))

- ``gibbs`` (non-stationary; Gibbs 1997, the multivariate form of Paciorek & Schervish 2004 with an
  isotropic, input-dependent lengthscale ``l(x)``)::

      k(x, x') = sigma_f^2 * (2 l(x) l(x') / (l(x)^2 + l(x')^2))^(D/2)
                           * exp(-|x - x'|^2 / (l(x)^2 + l(x')^2))

      l(x) = l0 * r^(x_1 / 2)

  so the lengthscale grows smoothly along the first coordinate from ``l0/sqrt(r)`` at ``x_1 = -1``
  (a wiggly function) to ``l0*sqrt(r)`` at ``x_1 = +1`` (a smooth one), with ``l0 = lengthscale``
  and ``r = lengthscale_ratio``. It is positive definite for any positive ``l(.)``, has the same
  marginal variance ``sigma_f^2`` everywhere, and equals the RBF kernel when ``r = 1``.

**Sampling.** The kernel matrix of all ``n_train + n_val + n_test`` inputs is built in float64,
``jitter * sigma_f^2`` is added to its diagonal and it is factorised ``K = L L^T`` (Cholesky); when
the factorisation fails the jitter is raised tenfold up to ``1e-2`` before a ``GPSamplingError``
says what to change. One function ``f = L z`` (``z ~ N(0, I)``) is drawn jointly at all inputs, so the
three splits see the same function; then ``y = f + noise_std * eps``. Everything comes from one
``torch.Generator`` seeded with ``cfg.seed``, in a fixed order (inputs, function, noise), so a seed
fixes the data, and ``rbf`` and ``gibbs`` draws with the same seed share their inputs.

The splits are float32 tensors for training; the latent values ``f`` are kept beside the noisy
targets ``y`` so that a report can give the noise-free error too. ``posterior_mean_rmse`` gives the
error of the exact GP posterior mean (the Bayes-optimal predictor for this prior) as a reference.

**Cost and caching.** At the default sizes (10240 points) the draw is one 10240 x 10240 float64
Cholesky (0.8 GB per matrix, 1.9 GB peak) and the posterior-mean reference another of 8192: about
35-60 s together on one busy CPU core. ``load_gp_data`` does both once per data setting
(``GPConfig.data_dict``) and keeps the result under the runs folder's cache, shared safely by
concurrent trials (file lock, atomic rename; ``cemlab.data.cache``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from cemlab.data.cache import locked, new_build_dir, publish, stable_key
from cemlab.gp.config import GPConfig
from cemlab.paths import cache_dir

#: Bump when the sampling procedure changes, so that cached draws are not reused.
DATA_VERSION = 1

#: Largest relative jitter tried before giving up on a Cholesky factorisation.
MAX_JITTER = 1e-2


class GPSamplingError(RuntimeError):
    """The kernel matrix could not be factorised even with the largest jitter."""


@dataclass(frozen=True)
class GPSplit:
    """One split: inputs ``x`` [n, D], noisy targets ``y`` [n] and latent function values ``f`` [n]."""

    x: Tensor
    y: Tensor
    f: Tensor

    def __len__(self) -> int:
        return self.x.shape[0]


@dataclass(frozen=True)
class GPData:
    """Train/val/test splits of one function draw, float32, plus a description of the draw."""

    train: GPSplit
    val: GPSplit
    test: GPSplit
    meta: dict[str, Any] = field(default_factory=dict)


def sample_inputs(cfg: GPConfig, n: int, generator: torch.Generator) -> Tensor:
    """``n`` inputs uniform on ``[-1, 1]^n_inputs``, float64, shape [n, n_inputs]."""
    return torch.rand(n, cfg.n_inputs, generator=generator, dtype=torch.float64) * 2.0 - 1.0


def gibbs_lengthscale(cfg: GPConfig, x: Tensor) -> Tensor:
    """``l(x) = l0 * r^(x_1 / 2)`` for each row of ``x`` (shape [n])."""
    return cfg.lengthscale * cfg.lengthscale_ratio ** (x[:, 0].to(torch.float64) / 2.0)


def kernel_matrix(cfg: GPConfig, x1: Tensor, x2: Tensor | None = None) -> Tensor:
    """The prior covariance ``k(x1_i, x2_j)`` of ``cfg.kernel`` in float64 (no jitter, no noise)."""
    x1 = x1.to(torch.float64)
    x2 = x1 if x2 is None else x2.to(torch.float64)
    # In-place arithmetic: at the default sizes an n x n float64 matrix is 0.8 GB.
    k = _squared_distances(x1, x2)
    var = cfg.signal_std**2
    if cfg.kernel == "rbf":
        return k.div_(-2.0 * cfg.lengthscale**2).exp_().mul_(var)
    if cfg.kernel == "gibbs":
        l1 = gibbs_lengthscale(cfg, x1)[:, None]
        l2 = gibbs_lengthscale(cfg, x2)[None, :]
        s = l1**2 + l2**2
        k.div_(s).neg_().exp_()
        prefactor = s.reciprocal_().mul_(l1).mul_(l2).mul_(2.0).pow_(cfg.n_inputs / 2.0)
        return k.mul_(prefactor).mul_(var)
    raise ValueError(f"kernel={cfg.kernel!r} is unknown; choose 'rbf' or 'gibbs'")  # pydantic rejects it first


def _squared_distances(x1: Tensor, x2: Tensor) -> Tensor:
    # |a|^2 + |b|^2 - 2 a.b can come out slightly negative in floating point: clamp at 0.
    sq = (x1 * x1).sum(-1)[:, None] + (x2 * x2).sum(-1)[None, :]
    return sq.addmm_(x1, x2.T, alpha=-2.0).clamp_min_(0.0)


def cholesky_with_jitter(k: Tensor, scale: float, jitter: float) -> tuple[Tensor, float]:
    """Lower Cholesky factor of ``k + j * scale * I`` for the smallest ``j`` in ``jitter * 10^m`` that
    works (up to ``MAX_JITTER``); returns the factor and the relative jitter ``j`` used.

    The jitter is added to ``k``'s diagonal **in place** (no second n x n copy); pass a clone to
    keep ``k``."""
    if k.dtype != torch.float64:
        raise TypeError(f"kernel matrices are factorised in float64, got {k.dtype}")
    diag = k.diagonal()
    j, added = jitter, 0.0
    while True:
        diag.add_(j * scale - added)
        added = j * scale
        factor, info = torch.linalg.cholesky_ex(k)
        if int(info) == 0:
            return factor, j
        if j * 10.0 > MAX_JITTER * (1 + 1e-9):
            raise GPSamplingError(
                f"the {k.shape[0]}x{k.shape[0]} kernel matrix is not positive definite even with a diagonal "
                f"jitter of {j:g} * signal_std^2 (leading minor {int(info)} failed). Use fewer points "
                f"(n_train/n_val/n_test), a shorter lengthscale, or a larger noise_std; duplicate inputs "
                f"or a very long lengthscale make the matrix singular."
            )
        j *= 10.0


def sample_observations(
    cfg: GPConfig, x: Tensor, n_draws: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, float]:
    """``n_draws`` independent functions at the inputs ``x`` [n, D] and their noisy observations.

    Returns ``(f, y, jitter)``: float64 tensors of shape [n_draws, n] with ``f ~ N(0, K + j I)``
    and ``y = f + noise_std * eps``, and the relative jitter ``j`` the factorisation needed.
    The functions are drawn before the noise, from ``generator``."""
    factor, used = cholesky_with_jitter(kernel_matrix(cfg, x), cfg.signal_std**2, cfg.jitter)
    z = torch.randn(n_draws, x.shape[0], generator=generator, dtype=torch.float64)
    f = z @ factor.T
    eps = torch.randn(n_draws, x.shape[0], generator=generator, dtype=torch.float64)
    return f, f + cfg.noise_std * eps, used


def make_gp_data(cfg: GPConfig) -> GPData:
    """Draw the inputs, one function and the noise for ``cfg`` and split them train/val/test.

    Deterministic per ``cfg.seed``. The first ``n_train`` points are the training split, the next
    ``n_val`` validation, the last ``n_test`` test; the inputs are i.i.d., so this is a random split."""
    generator = torch.Generator().manual_seed(cfg.seed)
    x = sample_inputs(cfg, cfg.n_total, generator)
    f, y, used = sample_observations(cfg, x, 1, generator)
    f, y = f[0], y[0]
    bounds = (0, cfg.n_train, cfg.n_train + cfg.n_val, cfg.n_total)
    splits = [
        GPSplit(x=x[a:b].float(), y=y[a:b].float(), f=f[a:b].float()) for a, b in zip(bounds[:-1], bounds[1:])
    ]
    meta = {
        "kernel": cfg.kernel,
        "n_inputs": cfg.n_inputs,
        "n_train": cfg.n_train,
        "n_val": cfg.n_val,
        "n_test": cfg.n_test,
        "input_distribution": f"uniform[-1,1]^{cfg.n_inputs}",
        "signal_std": cfg.signal_std,
        "noise_std": cfg.noise_std,
        "lengthscale": cfg.lengthscale,
        "lengthscale_ratio": cfg.lengthscale_ratio if cfg.kernel == "gibbs" else 1.0,
        "jitter": used,
        "seed": cfg.seed,
        "train_y_mean": float(y[: cfg.n_train].mean()),
        "train_y_std": float(y[: cfg.n_train].std()),
    }
    return GPData(train=splits[0], val=splits[1], test=splits[2], meta=meta)


def rmse(pred: Tensor, target: Tensor) -> float:
    """Root mean squared error, accumulated in float64."""
    diff = pred.to(torch.float64).reshape(-1) - target.to(torch.float64).reshape(-1)
    return math.sqrt(float((diff * diff).mean()))


def posterior_mean_rmse(cfg: GPConfig, data: GPData, splits: tuple[str, ...] = ("val", "test")) -> dict[str, float]:
    """RMSE (against the noisy ``y``) of the exact GP posterior mean given the training split, with
    the true kernel and noise, on each of ``splits``: the Bayes-optimal predictor for this prior,
    a floor no regressor beats on average.

    ``mean = K_*t (K_tt + s^2 I)^-1 y_t``, one Cholesky factorisation in float64 for all splits."""
    train = data.train
    k_tt = kernel_matrix(cfg, train.x)
    k_tt.diagonal().add_(cfg.noise_std**2)
    factor, _ = cholesky_with_jitter(k_tt, cfg.signal_std**2, cfg.jitter)
    del k_tt
    alpha = torch.cholesky_solve(train.y.to(torch.float64)[:, None], factor)
    out = {}
    for name in splits:
        target = getattr(data, name)
        out[name] = rmse((kernel_matrix(cfg, target.x, train.x) @ alpha)[:, 0], target.y)
    return out


def load_gp_data(cfg: GPConfig, cache_root: str | Path | None = None, oracle: bool = True) -> GPData:
    """``make_gp_data(cfg)`` through an on-disk cache keyed by ``cfg.data_dict()``.

    ``cache_root`` defaults to ``<runs>/cache/gp``. With ``oracle`` the entry's ``meta`` also holds
    ``oracle_val_rmse`` / ``oracle_test_rmse`` (``posterior_mean_rmse``), computed when the entry is
    built. Concurrent callers with the same settings build it once (the others wait on the lock)."""
    root = Path(cache_root) if cache_root is not None else cache_dir() / "gp"
    key = stable_key({"version": DATA_VERSION, **cfg.data_dict()})
    entry = root / key
    if not _complete(entry, oracle):
        with locked(root, key):
            if not _complete(entry, oracle):
                data = make_gp_data(cfg)
                if oracle:
                    for name, value in posterior_mean_rmse(cfg, data, ("val", "test")).items():
                        data.meta[f"oracle_{name}_rmse"] = value
                build = new_build_dir(root, key)
                tensors = {f"{name}.{t}": getattr(getattr(data, name), t)
                           for name in ("train", "val", "test") for t in ("x", "y", "f")}
                torch.save(tensors, build / "data.pt")
                (build / "meta.json").write_text(json.dumps(data.meta, indent=1, sort_keys=True))
                publish(build, entry)
    tensors = torch.load(entry / "data.pt", weights_only=True)
    meta = json.loads((entry / "meta.json").read_text())
    splits = {name: GPSplit(*(tensors[f"{name}.{t}"] for t in ("x", "y", "f"))) for name in ("train", "val", "test")}
    return GPData(**splits, meta=meta)


def _complete(entry: Path, oracle: bool) -> bool:
    meta = entry / "meta.json"
    if not (meta.is_file() and (entry / "data.pt").is_file()):
        return False
    return not oracle or "oracle_test_rmse" in json.loads(meta.read_text())


class TensorPairs(torch.utils.data.Dataset):
    """``(x[i], y[i])`` pairs of two tensors (the GP study's inputs and targets)."""

    def __init__(self, x: Tensor, y: Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]
