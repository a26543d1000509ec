"""The GP recursion study (issue 6): data drawn with the kernel's covariance, determinism, config
errors, the regressor's forward / parameter / FLOP accounting, and that training it beats the mean.

Statistical tolerances come from the number of draws: for zero-mean Gaussian data the empirical
covariance ``C_ij = mean(y_i y_j)`` over N draws has standard error ``sqrt((S_ii S_jj + S_ij^2) / N)``,
and every entry is held to the z-score whose two-sided tail, Bonferroni-corrected over all entries
checked, is ``ALPHA``.
"""

from __future__ import annotations

import math
import time
from statistics import NormalDist

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch.utils.flop_counter import FlopCounterMode

from cemlab.gp import GPConfig, GPSamplingError, make_gp_data, rmse
from cemlab.gp.data import (
    cholesky_with_jitter, kernel_matrix, load_gp_data, posterior_mean_rmse, sample_observations,
)
from cemlab.models.cem import CEMMLP
from cemlab.models.gp import GPRegressor, count_parameters, flops_per_example

#: Family-wise probability that a correct sampler fails a statistical check below.
ALPHA = 1e-6
N_DRAWS = 40_000


def z_threshold(n_checks: int, alpha: float = ALPHA) -> float:
    """Two-sided Bonferroni z-score: P(any of n_checks |Z| > z) <= alpha."""
    return NormalDist().inv_cdf(1.0 - alpha / (2.0 * n_checks))


def reference_kernel(cfg: GPConfig, points: list[list[float]]) -> torch.Tensor:
    """The kernel matrix written out pair by pair from the formulas in ``cemlab.gp.data``'s docstring
    (plain Python floats; independent of ``kernel_matrix``)."""
    D, var = len(points[0]), cfg.signal_std**2

    def ell(p: list[float]) -> float:
        return cfg.lengthscale * cfg.lengthscale_ratio ** (p[0] / 2.0)

    n = len(points)
    K = torch.empty(n, n, dtype=torch.float64)
    for i, a in enumerate(points):
        for j, b in enumerate(points):
            d2 = sum((ai - bi) ** 2 for ai, bi in zip(a, b))
            if cfg.kernel == "rbf":
                K[i, j] = var * math.exp(-d2 / (2.0 * cfg.lengthscale**2))
            else:
                la, lb = ell(a), ell(b)
                s = la * la + lb * lb
                K[i, j] = var * (2.0 * la * lb / s) ** (D / 2.0) * math.exp(-d2 / s)
    return K


def fixed_points(n_inputs: int = 10) -> list[list[float]]:
    """Six inputs with correlations from strong to weak: near neighbours of a centre point, the
    opposite corner, and points at both ends of the first coordinate (where the Gibbs lengthscale differs)."""
    g = torch.Generator().manual_seed(1234)
    centre = torch.rand(n_inputs, generator=g, dtype=torch.float64) * 1.2 - 0.6
    pts = [centre, centre + 0.15, centre - 0.4 * torch.linspace(-1, 1, n_inputs, dtype=torch.float64)]
    pts.append(-0.9 * torch.sign(centre))  # the opposite corner of the box
    low, high = centre.clone(), centre.clone()
    low[0], high[0] = -0.9, 0.9
    pts += [low, high]
    return [p.tolist() for p in pts]


def covariance_z_scores(y: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """z-scores of the empirical mean and covariance of zero-mean draws y [N, n] against ``expected``."""
    N = y.shape[0]
    mean_z = y.mean(0) / torch.sqrt(torch.diagonal(expected) / N)
    C = y.T @ y / N
    d = torch.diagonal(expected)
    se = torch.sqrt((d[:, None] * d[None, :] + expected**2) / N)
    return mean_z, (C - expected) / se


def gibbs_cfg(**kw) -> GPConfig:
    return GPConfig(kernel="gibbs", lengthscale=1.5, lengthscale_ratio=4.0, **kw)


# ---------------------------------------------------------------------------------------------
# (a) the sampled data has the kernel's covariance
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["rbf", "gibbs"])
def test_kernel_matrix_matches_formula(kernel):
    cfg = GPConfig(kernel=kernel)
    pts = fixed_points()
    K = kernel_matrix(cfg, torch.tensor(pts, dtype=torch.float64))
    assert K.dtype == torch.float64
    torch.testing.assert_close(K, reference_kernel(cfg, pts), rtol=1e-12, atol=1e-14)
    # The points span correlations from strong to weak, so the covariance test below is informative.
    off = K[~torch.eye(len(pts), dtype=torch.bool)]
    assert off.max() > 0.9 and off.min() < 0.2


@pytest.mark.parametrize("kernel", ["rbf", "gibbs"])
def test_sampled_covariance_matches_kernel(kernel):
    cfg = GPConfig(kernel=kernel, noise_std=0.3)
    pts = fixed_points()
    x = torch.tensor(pts, dtype=torch.float64)
    f, y, jitter = sample_observations(cfg, x, N_DRAWS, torch.Generator().manual_seed(7))
    n = len(pts)
    K = reference_kernel(cfg, pts) + jitter * cfg.signal_std**2 * torch.eye(n, dtype=torch.float64)
    S = K + cfg.noise_std**2 * torch.eye(n, dtype=torch.float64)

    # 2 * (n + n(n+1)/2) checks: mean and covariance, of the noisy y and of the latent f.
    z = z_threshold(2 * (n + n * (n + 1) // 2))
    for draws, expected in ((y, S), (f, K)):
        mean_z, cov_z = covariance_z_scores(draws, expected)
        assert mean_z.abs().max() < z, f"{kernel}: sample mean off by {mean_z.abs().max():.1f} standard errors"
        assert cov_z.abs().max() < z, f"{kernel}: covariance off by {cov_z.abs().max():.1f} standard errors"

    # The check has power: the same draws reject a kernel that is only mildly different
    # (lengthscale x1.3, and for Gibbs also the stationary kernel with the same l0).
    wrong = [cfg.model_copy(update={"lengthscale": cfg.lengthscale * 1.3})]
    if kernel == "gibbs":
        wrong.append(cfg.model_copy(update={"lengthscale_ratio": 1.0}))
    for other in wrong:
        S_other = reference_kernel(other, pts) + cfg.noise_std**2 * torch.eye(n, dtype=torch.float64)
        _, cov_z = covariance_z_scores(y, S_other)
        assert cov_z.abs().max() > 2 * z


def test_gibbs_with_constant_lengthscale_is_rbf():
    x = torch.rand(50, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    torch.testing.assert_close(
        kernel_matrix(GPConfig(kernel="gibbs", lengthscale_ratio=1.0), x), kernel_matrix(GPConfig(kernel="rbf"), x),
        rtol=1e-12, atol=1e-14,
    )


def test_splits_come_from_one_function():
    """The exact GP posterior given the training split predicts the test split almost to the noise
    level; it could not if val/test were drawn from other functions."""
    cfg = GPConfig(n_train=512, n_val=64, n_test=256, lengthscale=2.5, noise_std=0.05)
    data = make_gp_data(cfg)
    baseline = rmse(torch.full_like(data.test.y, float(data.train.y.mean())), data.test.y)
    posterior = posterior_mean_rmse(cfg, data, ("test",))["test"]
    assert posterior < 0.35 * baseline
    # ... and no regressor beats the noise floor on average: RMSE^2 >= noise variance, up to chance.
    se_var = cfg.noise_std**2 * math.sqrt(2.0 / cfg.n_test)
    assert posterior**2 > cfg.noise_std**2 - z_threshold(1) * se_var
    # y - f is the observation noise.
    noise = data.train.y - data.train.f
    assert abs(float(noise.std()) - cfg.noise_std) < z_threshold(1) * cfg.noise_std / math.sqrt(2 * cfg.n_train)


# ---------------------------------------------------------------------------------------------
# (b) determinism
# ---------------------------------------------------------------------------------------------


def test_data_deterministic_per_seed_and_shapes():
    cfg = GPConfig(n_train=300, n_val=50, n_test=80, seed=3)
    a, b = make_gp_data(cfg), make_gp_data(cfg)
    for split, n in (("train", 300), ("val", 50), ("test", 80)):
        sa, sb = getattr(a, split), getattr(b, split)
        assert sa.x.shape == (n, 10) and sa.y.shape == (n,) and sa.f.shape == (n,)
        assert sa.x.dtype == sa.y.dtype == sa.f.dtype == torch.float32
        assert torch.equal(sa.x, sb.x) and torch.equal(sa.y, sb.y) and torch.equal(sa.f, sb.f)
        assert float(sa.x.min()) >= -1.0 and float(sa.x.max()) <= 1.0
    assert a.meta == b.meta and a.meta["seed"] == 3 and a.meta["kernel"] == "rbf"

    c = make_gp_data(cfg.model_copy(update={"seed": 4}))
    assert not torch.allclose(a.train.x, c.train.x) and not torch.allclose(a.train.f, c.train.f)
    # Same seed, other kernel: the same inputs, another function.
    g = make_gp_data(cfg.model_copy(update={"kernel": "gibbs"}))
    assert torch.equal(a.train.x, g.train.x) and not torch.allclose(a.train.f, g.train.f)
    # The train/val/test inputs are distinct draws, not copies.
    assert not torch.allclose(a.train.x[:50], a.val.x)


def test_cache_returns_the_same_draw(tmp_path):
    cfg = GPConfig(kernel="gibbs", n_train=200, n_val=40, n_test=60, seed=5)
    first = load_gp_data(cfg, cache_root=tmp_path)
    fresh = make_gp_data(cfg)
    again = load_gp_data(cfg.model_copy(update={"steps": 4, "latent_dim": 8}), cache_root=tmp_path)
    assert len(list(tmp_path.glob("*/data.pt"))) == 1  # model settings do not change the data key
    for split in ("train", "val", "test"):
        for t in ("x", "y", "f"):
            assert torch.equal(getattr(getattr(first, split), t), getattr(getattr(fresh, split), t))
            assert torch.equal(getattr(getattr(again, split), t), getattr(getattr(fresh, split), t))
    reference = posterior_mean_rmse(cfg, fresh)
    assert again.meta["oracle_test_rmse"] == pytest.approx(reference["test"])
    assert again.meta["oracle_val_rmse"] == pytest.approx(reference["val"])
    load_gp_data(cfg.model_copy(update={"seed": 6}), cache_root=tmp_path)
    assert len(list(tmp_path.glob("*/data.pt"))) == 2


# ---------------------------------------------------------------------------------------------
# (c) bad input fails, naming the field
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kernel": "matern"}, "kernel"),
        ({"n_inputs": 0}, "n_inputs"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"lengthscale": 0.0}, "lengthscale"),
        ({"lengthscale_ratio": 0.5}, "lengthscale_ratio"),
        ({"n_train": 1}, "n_train"),
        ({"steps": 0}, "steps"),
        ({"precond": "full"}, "precond"),
        ({"precond": "dplr", "latent_dim": 16, "precond_rank": 16}, "precond_rank"),
        ({"kernal": "rbf"}, "kernal"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValidationError) as e:
        GPConfig(**kwargs)
    assert field in str(e.value)


def test_gp_section_is_the_data_draw_then_the_regressor():
    """The ``gp:`` section keeps its keys in their order (they are listed in error messages and in
    the config written with every run): the data draw's, then the regressor's, ``n_inputs`` once."""
    from cemlab.gp.config import GPDataConfig
    from cemlab.models.config import GPRegressorConfig

    keys = list(GPConfig.model_fields)
    assert keys == ["kernel", "n_inputs", "n_train", "n_val", "n_test", "signal_std", "noise_std", "lengthscale",
                    "lengthscale_ratio", "jitter", "seed", "latent_dim", "hidden_dim", "n_layers", "steps", "eta",
                    "precond", "precond_rank", "norm_eps", "init_std"]
    assert keys == list(GPDataConfig.model_fields) + list(GPRegressorConfig.model_fields)[1:]
    assert list(GPConfig.DATA_FIELDS) == list(GPDataConfig.model_fields)
    # The regressor builds from its own config, and from the whole section alike.
    reg = GPRegressorConfig(n_inputs=3, latent_dim=8, steps=2)
    whole = GPConfig(n_inputs=3, latent_dim=8, steps=2, n_train=50)
    torch.manual_seed(0)
    a = GPRegressor(reg)
    torch.manual_seed(0)
    b = GPRegressor(whole)
    x = torch.randn(4, 3)
    torch.testing.assert_close(a(x), b(x))
    assert flops_per_example(reg) == flops_per_example(whole)


def test_cholesky_retries_with_more_jitter_then_fails_clearly():
    # Slightly indefinite (smallest eigenvalue -1e-5): fixed by a larger jitter, which is reported.
    q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    k = q @ torch.diag(torch.tensor([-1e-5, 0.5, 1.0, 1.5, 2.0], dtype=torch.float64)) @ q.T
    work = k.clone()
    factor, used = cholesky_with_jitter(work, scale=1.0, jitter=1e-6)
    assert used == pytest.approx(1e-4)
    jittered = k + used * torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(factor @ factor.T, jittered)
    torch.testing.assert_close(work, jittered)  # the jitter went onto the diagonal in place, once
    # Clearly indefinite: a GPSamplingError that says what to change.
    bad = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)
    with pytest.raises(GPSamplingError, match="lengthscale"):
        cholesky_with_jitter(bad, scale=1.0, jitter=1e-6)
    with pytest.raises(TypeError, match="float64"):
        cholesky_with_jitter(bad.float(), scale=1.0, jitter=1e-6)


# ---------------------------------------------------------------------------------------------
# The regressor: forward, parameters, FLOPs (e)
# ---------------------------------------------------------------------------------------------


def test_regressor_forward_is_input_projection_cem_steps_readout():
    cfg = GPConfig(latent_dim=16, hidden_dim=24, steps=3, eta=0.7)
    torch.manual_seed(0)
    model = GPRegressor(cfg).double()
    layer = model.layers[0]
    assert isinstance(layer, CEMMLP)  # the language models' layer
    x = torch.rand(5, 10, dtype=torch.float64) * 2 - 1

    def rms(v):  # RMSNorm with its weight
        return layer.norm.weight * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + cfg.norm_eps)

    h = x @ model.input.weight.T + model.input.bias
    gamma = rms(h) @ layer.W.weight.T
    state = h
    for _ in range(3):  # eq. 13 with P = I
        state = state + 0.7 * (gamma * F.silu(rms(state) @ layer.V.weight.T)) @ layer.V.weight
    expected = state @ model.readout.weight[0] + model.readout.bias[0]
    torch.testing.assert_close(model(x), expected, rtol=1e-12, atol=1e-12)

    # Test-time recursion: fewer steps give another output; the context manager restores T.
    with model.recursion_steps(1):
        assert not torch.allclose(model(x), expected)
    assert layer.steps == 3
    trace = model.energy_trace(x)
    assert trace.shape == (1, 4)
    with pytest.raises(ValueError, match="n_inputs=10"):
        model(torch.zeros(5, 3, dtype=torch.float64))


@pytest.mark.parametrize("precond", ["none", "diag", "dplr"])
def test_parameter_count(precond):
    cfg = GPConfig(latent_dim=24, hidden_dim=40, n_layers=2, precond=precond, precond_rank=4)
    D, Dv, R = 24, 40, 4
    pre = {"none": 0, "diag": D, "dplr": D + 2 * D * R}[precond]
    counts = count_parameters(GPRegressor(cfg))
    assert counts["input"] == 10 * D + D
    assert counts["readout"] == D + 1
    assert counts["cem_projections"] == 2 * 2 * D * Dv
    assert counts["preconditioners"] == 2 * pre
    assert counts["cem"] == 2 * (2 * D * Dv + D + pre)  # W, V, the RMSNorm weight, P
    assert counts["total"] == sum(p.numel() for p in GPRegressor(cfg).parameters())
    assert counts["total"] == counts["input"] + counts["cem"] + counts["readout"]
    # Recursion adds no parameters.
    assert count_parameters(GPRegressor(cfg.model_copy(update={"steps": 8}))) == counts


@pytest.mark.parametrize("precond", ["none", "diag", "dplr"])
@pytest.mark.parametrize("steps", [1, 3])
def test_flops_per_example_match_flop_counter(precond, steps):
    cfg = GPConfig(latent_dim=32, hidden_dim=48, n_layers=2, steps=steps, precond=precond, precond_rank=4)
    model, batch = GPRegressor(cfg), 7
    with FlopCounterMode(display=False) as counter:
        model(torch.rand(batch, 10))
    flops = flops_per_example(cfg)
    assert flops["forward"] == counter.get_total_flops() / batch
    assert flops["train"] == 3 * flops["forward"]
    assert flops["forward"] == flops["input"] + flops["cem"] + flops["readout"]
    # Test-time recursion: the count follows the steps actually run.
    with model.recursion_steps(steps + 2), FlopCounterMode(display=False) as counter:
        model(torch.rand(batch, 10))
    assert flops_per_example(cfg, steps=steps + 2)["forward"] == counter.get_total_flops() / batch


# ---------------------------------------------------------------------------------------------
# (d) a trained regressor beats predicting the training mean by a wide margin
# ---------------------------------------------------------------------------------------------


def train_plain(cfg: GPConfig, data, steps: int, lr: float = 3e-3, batch_size: int = 128, seed: int = 0):
    """A plain PyTorch loop: AdamW, one-cycle schedule, gradient clipping, MSE on random batches."""
    torch.manual_seed(seed)
    model = GPRegressor(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(data.train), (batch_size,), generator=g)
        loss = F.mse_loss(model(data.train.x[idx]), data.train.y[idx])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return model.eval()


@pytest.fixture
def one_thread():
    """Tiny matmuls run fastest on one thread, and do not fight other processes for the cores."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["rbf", "gibbs"])
def test_trained_regressor_beats_mean_and_linear_fit(kernel, one_thread):
    # A quarter of the default training set (a faster draw); the default model, T = 2.
    cfg = GPConfig(kernel=kernel, n_train=2048, n_val=256, n_test=1024, lengthscale=1.5, steps=2, seed=0)
    data = make_gp_data(cfg)
    start = time.perf_counter()
    model = train_plain(cfg, data, steps=400)
    with torch.no_grad():
        model_rmse = rmse(model(data.test.x), data.test.y)
    mean_rmse = rmse(torch.full_like(data.test.y, float(data.train.y.mean())), data.test.y)
    ones = lambda x: torch.cat([x, torch.ones(len(x), 1)], 1).double()  # noqa: E731
    w = torch.linalg.lstsq(ones(data.train.x), data.train.y.double()[:, None]).solution
    linear_rmse = rmse(ones(data.test.x) @ w, data.test.y)
    print(f"{kernel}: model {model_rmse:.3f}  linear {linear_rmse:.3f}  mean {mean_rmse:.3f}  "
          f"({time.perf_counter() - start:.1f}s)")
    # Wide margin: the model explains at least half the variance the mean leaves (R^2 >= 0.5) ...
    assert model_rmse**2 < 0.5 * mean_rmse**2
    # ... and learns the non-linear function: a linear fit stays close to the mean.
    assert model_rmse < 0.8 * linear_rmse
