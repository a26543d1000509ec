"""Settings of the Gaussian-process recursion study (paper Table 3): the data draw and the regressor.

``GPConfig`` is a pydantic model with ``extra="forbid"``, like every cemlab config: an unknown key,
a wrong type or a bad value raises ``pydantic.ValidationError`` naming the field before any
kernel matrix is built. It is the ``gp:`` section of a run config with ``task: gp``; the optimiser,
schedule and the model-initialisation seed come from the ``train:`` section as for language models.
The section is flat: the data draw's fields (``GPDataConfig``, here) and the regressor's
(``cemlab.models.config.GPRegressorConfig``, with the model library) in one mapping.

Defaults are sized so that one training run reaches a meaningful test RMSE in well under a
minute on one CPU core (see ``cemlab/gp/data.py`` for the data, ``cemlab/models/gp.py`` for the model).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from cemlab.models.config import GPRegressorConfig, StrictModel

Kernel = Literal["rbf", "gibbs"]


class GPDataConfig(StrictModel):
    """The data draw of a GP regression task: inputs, kernel, noise, sizes and seed (the fields
    that ``cemlab.gp.data`` reads)."""

    kernel: Kernel = Field(
        default="rbf",
        description="'rbf' (stationary squared exponential) or 'gibbs' (non-stationary: the lengthscale "
        "varies with the first input coordinate).",
    )
    n_inputs: int = Field(default=10, ge=1, description="Input dimension (paper: 10).")
    n_train: int = Field(default=8192, ge=2, description="Training examples.")
    n_val: int = Field(default=1024, ge=1, description="Validation examples.")
    n_test: int = Field(default=1024, ge=1, description="Test examples.")
    signal_std: float = Field(default=1.0, gt=0, description="Prior standard deviation sigma_f of f(x).")
    noise_std: float = Field(default=0.1, ge=0, description="Standard deviation of the Gaussian observation noise.")
    lengthscale: float = Field(
        default=1.5,
        gt=0,
        description="RBF lengthscale l; for 'gibbs' the geometric mean l0 of the input-dependent lengthscale. "
        "1.5 on [-1,1]^10 (typical distance 2.6) gives a clearly non-linear function (a linear fit "
        "leaves ~75% of the RMSE of the mean) that 8192 examples pin down (the exact GP posterior "
        "reaches ~0.12 RBF / ~0.23 Gibbs against noise 0.1), with room between a trained model and that floor.",
    )
    lengthscale_ratio: float = Field(
        default=4.0,
        ge=1,
        description="'gibbs' only (ignored for 'rbf'): ratio of the largest to the smallest lengthscale "
        "over the input box (l(x) runs from l0/sqrt(r) at x_1=-1 to l0*sqrt(r) at x_1=+1); 1 gives the RBF kernel.",
    )
    jitter: float = Field(
        default=1e-6,
        gt=0,
        lt=1,
        description="Diagonal jitter, relative to signal_std^2, for the Cholesky factor; raised x10 "
        "(up to 1e-2) when the factorisation fails.",
    )
    seed: int = Field(
        default=0,
        ge=0,
        description="Seed of the draw: inputs, function and noise. The model initialisation uses train.seed.",
    )

    #: The fields that determine the data draw (the rest configure the model).
    DATA_FIELDS: ClassVar[tuple[str, ...]] = (
        "kernel", "n_inputs", "n_train", "n_val", "n_test", "signal_std", "noise_std", "lengthscale",
        "lengthscale_ratio", "jitter", "seed",
    )

    def data_dict(self) -> dict[str, Any]:
        """The data-defining settings (``DATA_FIELDS``; ``lengthscale_ratio`` only for 'gibbs'):
        equal dicts give identical data, so this keys the data cache."""
        d = {k: getattr(self, k) for k in self.DATA_FIELDS}
        if self.kernel != "gibbs":
            d.pop("lengthscale_ratio")
        return d

    @property
    def n_total(self) -> int:
        return self.n_train + self.n_val + self.n_test


# Bases in this order put the data fields first, then the regressor's (the section's key order,
# seen in configs written to MLflow and in error messages); n_inputs is a field of both, the data's
# input dimension being the regressor's input width.
class GPConfig(GPRegressorConfig, GPDataConfig):
    """One GP regression task (data) and the recursive CEM regressor trained on it.

    Data: inputs uniform on ``[-1, 1]^n_inputs``; targets ``y = f(x) + noise_std * eps`` with
    ``f ~ GP(0, k)``, ``k`` the ``rbf`` kernel or the non-stationary ``gibbs`` kernel (formulas in
    ``cemlab.gp.data``). The function is drawn once, jointly at all train/val/test inputs.

    Model: ``Linear(n_inputs -> latent_dim)``, ``n_layers`` recursive CEM MLP layers of hidden width
    ``hidden_dim`` with ``steps`` descent steps of size ``eta`` and preconditioner ``precond``,
    then ``Linear(latent_dim -> 1)``.
    """
