"""The models' configuration: a causal language model (``ModelConfig`` and its size ``PRESETS``)
and the GP study's regressor (``GPRegressorConfig``).

Every config is a pydantic model with ``extra="forbid"``: an unknown key, a wrong type or an
invalid combination raises ``pydantic.ValidationError`` whose message names the field and says
what is allowed, before any compute is spent. This module depends on pydantic only, so the model
library stays self-contained; a run's config (``cemlab.config.RunConfig``) and the GP study's
``gp:`` section (``cemlab.gp.config.GPConfig``) are built on these classes.

Field names follow the usual Transformer spelling (``d_model``, ``n_layers``, ``n_heads``, ``d_mlp``,
``vocab_size``, ``context_length``, ``attention``, ``mlp``). Per-sublayer options carry an
``attn_`` or ``mlp_`` prefix so that a flattened config is a flat list of MLflow params.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SublayerKind = Literal["llama", "cem"]
Preconditioner = Literal["none", "diag", "dplr"]
KQDiagonal = Literal["none", "shared", "per_head"]
AttnKernel = Literal["auto", "reference", "flash", "flex"]
#: A CEM step size: a fixed eta > 0, "1/T" (1/steps) or "learned" (softplus, per layer and step, from 1/T).
#: Upper bounds on what a user may set: far above any experiment of the paper, below what would
#: exhaust memory or make a run meaningless (a typo like attn_steps=1000000 is refused, not run).
MAX_STEPS, MAX_ETA, MAX_WIDTH, MAX_LAYERS = 64, 10.0, 1 << 18, 1024
StepSize = Annotated[float, Field(gt=0, le=MAX_ETA)] | Literal["1/T", "learned"]


class StrictModel(BaseModel):
    """Base for every cemlab config: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)


class ModelConfig(StrictModel):
    """One causal language model: a Llama baseline, a CEM variant, or anything in between.

    Attention and MLP sublayers are chosen independently (``attention``/``mlp``). A CEM sublayer
    takes ``*_steps`` descent steps on its energy (paper eq. 3 / 9, recursion of section 2.3) with
    step size ``*_eta`` and preconditioner ``*_precond``. ``*_reuse`` applies the whole residual
    sub-block that many times (the paper's "plain layer reuse" control, Fig. 3c / 4).
    """

    name: str | None = Field(default=None, description="Preset this config came from, if any (e.g. '86m').")
    d_model: int = Field(default=64, ge=8, le=MAX_WIDTH, description="Residual stream width D.")
    n_layers: int = Field(default=2, ge=1, le=MAX_LAYERS, description="Number of Transformer blocks.")
    n_heads: int = Field(default=4, ge=1, le=MAX_LAYERS, description="Attention heads K; head width D/K.")
    d_mlp: int = Field(default=172, ge=1, le=MAX_WIDTH, description="MLP hidden width (Llama SwiGLU / CEM projection width D_v).")
    vocab_size: int = Field(default=512, ge=2, le=1 << 21, description="Vocabulary size.")
    context_length: int = Field(default=128, ge=2, le=1 << 20, description="Maximum sequence length.")

    attention: SublayerKind = Field(default="llama", description="Attention sublayer: 'llama' (RoPE MHA) or 'cem'.")
    mlp: SublayerKind = Field(default="llama", description="MLP sublayer: 'llama' (SwiGLU) or 'cem'.")

    attn_steps: int = Field(default=1, ge=1, le=MAX_STEPS, description="CEM attention recursion steps T_eps (paper sec. 2.3).")
    mlp_steps: int = Field(default=1, ge=1, le=MAX_STEPS, description="CEM MLP recursion steps T_xi.")
    attn_eta: StepSize = Field(
        default=1.0, description="CEM attention step size eta_eps: a number > 0 (every step), '1/T' (total step "
        "T*eta = 1 whatever T) or 'learned' (one positive scalar per layer and step, initialised to 1/T).")
    mlp_eta: StepSize = Field(default=1.0, description="CEM MLP step size eta_xi: a number > 0, '1/T' or 'learned'.")
    cem_x0: Literal["h", "rmsnorm"] = Field(
        default="h", description="Where a CEM sublayer's descent state starts: 'h' (the residual stream, x0 = h) or "
        "'rmsnorm' (x0 = RMSNorm(h), the residual absorbed into the recursion: Algorithm 1 read literally).")
    attn_precond: Preconditioner = Field(default="none", description="Per-head preconditioner P_k for CEM attention.")
    mlp_precond: Preconditioner = Field(default="none", description="Preconditioner P_mlp for the CEM MLP.")
    attn_precond_rank: int = Field(default=4, ge=1, le=MAX_WIDTH, description="Low rank R of the dplr attention preconditioner (paper C.4: 4).")
    mlp_precond_rank: int = Field(default=16, ge=1, le=MAX_WIDTH, description="Low rank R of the dplr MLP preconditioner (paper C.4: 16).")
    kq_diagonal: KQDiagonal = Field(default="none", description="Diagonal term of A_k = diag(d_k) + Wq_k^T Wk_k (sec. 2.3).")
    exact_energy_gradient: bool = Field(
        default=False,
        description="Add the diagonal's own gradient term sum_j alpha_ij d_k*h_j to the attention step. "
        "False is the paper's Algorithm 1 (diagonal in the scores only).",
    )
    attn_reuse: int = Field(default=1, ge=1, le=MAX_STEPS, description="Plain reuse: apply the whole attention sub-block this many times.")
    mlp_reuse: int = Field(default=1, ge=1, le=MAX_STEPS, description="Plain reuse: apply the whole MLP sub-block this many times.")
    mlp_param_matched: bool = Field(
        default=False, description="CEM MLP hidden width x1.5 so that it has as many parameters as the Llama MLP (Fig. 2b)."
    )
    alibi: bool = Field(default=True, description="ALiBi bias -m_k|i-j| in CEM attention (appendix A).")
    alibi_max_bias: float = Field(default=8.0, gt=0, description="ALiBi slopes m_k = 2^(-max_bias*k/K), k=1..K.")
    self_other_bias: bool = Field(default=True, description="Learnable self/other-token score biases in CEM attention.")
    attn_kernel: AttnKernel = Field(
        default="auto",
        description="CEM attention scores: 'reference' (SDPA with a materialised [K,S,S] bias that carries "
        "the self/other bias's gradient), 'flash' (CPU: the same bias held constant so that SDPA's flash "
        "kernel runs, the self/other bias's gradient from its log-sum-exp), 'flex' (FlexAttention, biases "
        "as score_mod, causal block mask; training needs CUDA in torch 2.13) or 'auto' (flex on CUDA where "
        "the heads stay narrow, flash on CPU without a KQ diagonal, reference elsewhere). Same numbers either way "
        "(docs/performance.md).",
    )
    rope_theta: float = Field(default=10000.0, gt=0, description="RoPE base for Llama attention.")
    norm_eps: float = Field(default=1e-6, gt=0, description="RMSNorm epsilon (Hugging Face Llama default 1e-6).")
    init_std: float = Field(default=0.02, gt=0, description="Std of the normal init of linear and embedding weights.")
    checkpoint_recursion: bool = Field(
        default=False, description="Activation checkpointing per recursion step (memory of T=1 plus a little)."
    )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def cem_mlp_width(self) -> int:
        """Width D_v of the CEM MLP projections (x1.5 when parameter-matched)."""
        return (self.d_mlp * 3) // 2 if self.mlp_param_matched else self.d_mlp

    @property
    def kind(self) -> str:
        """Short label of the model family: llama, cem-attn, cem-mlp or cem."""
        if self.attention == "cem" and self.mlp == "cem":
            return "cem"
        if self.attention == "cem":
            return "cem-attn"
        if self.mlp == "cem":
            return "cem-mlp"
        return "llama"

    def matched_baseline(self) -> "ModelConfig":
        """The Llama baseline with the same dimensions (its parameters set the Chinchilla budget
        that every variant of it trains on)."""
        keep = ("d_model", "n_layers", "n_heads", "d_mlp", "vocab_size", "context_length", "rope_theta",
                "norm_eps", "init_std")
        return ModelConfig(name=self.name, **{k: getattr(self, k) for k in keep})

    @model_validator(mode="after")
    def _check_combinations(self) -> "ModelConfig":
        errors: list[str] = []
        if self.d_model % self.n_heads != 0:
            errors.append(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: choose n_heads among "
                f"the divisors of d_model ({_divisors(self.d_model)})"
            )
        elif (self.d_model // self.n_heads) % 2 != 0 and self.attention == "llama":
            errors.append(
                f"head width d_model/n_heads={self.d_model // self.n_heads} is odd: RoPE needs an even head width"
            )
        for sub in ("attn", "mlp"):
            rank = getattr(self, f"{sub}_precond_rank")
            if getattr(self, f"{sub}_precond") == "dplr" and rank >= self.d_model:
                errors.append(
                    f"{sub}_precond_rank={rank} must be < d_model={self.d_model} (a low-rank correction; "
                    f"the paper uses 4 for attention, 16 for the MLP)"
                )
        if self.attention == "llama":
            for f, default in (("attn_steps", 1), ("attn_precond", "none"), ("kq_diagonal", "none")):
                if getattr(self, f) != default:
                    errors.append(
                        f"{f}={getattr(self, f)!r} needs attention='cem' (Llama attention has no energy "
                        f"recursion, preconditioner or KQ diagonal); use attn_reuse for plain reuse"
                    )
        if self.mlp == "llama":
            for f, default in (("mlp_steps", 1), ("mlp_precond", "none"), ("mlp_param_matched", False)):
                if getattr(self, f) != default:
                    errors.append(
                        f"{f}={getattr(self, f)!r} needs mlp='cem'; use mlp_reuse for plain reuse of a Llama MLP"
                    )
        if self.exact_energy_gradient and self.kq_diagonal == "none":
            errors.append("exact_energy_gradient=True needs kq_diagonal='shared' or 'per_head' (it adds the diagonal's gradient)")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        """A named size: the paper's Table 1 (``86m`` ... ``162m``), ``256m`` or a small one."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], "name": name, **overrides})


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


#: Paper Table 1 (vocab 32000, context 2048) plus 256m (appendix; dims chosen here, since the
#: paper does not list them) and small presets for laptops (``small``), CPU sweeps (``tiny``)
#: and tests (``nano``).
PRESETS: dict[str, dict[str, Any]] = {
    "86m": dict(d_model=672, n_layers=8, n_heads=8, d_mlp=1792, vocab_size=32000, context_length=2048),
    "108m": dict(d_model=672, n_layers=12, n_heads=12, d_mlp=1792, vocab_size=32000, context_length=2048),
    "134m": dict(d_model=768, n_layers=12, n_heads=12, d_mlp=2048, vocab_size=32000, context_length=2048),
    "162m": dict(d_model=864, n_layers=12, n_heads=12, d_mlp=2304, vocab_size=32000, context_length=2048),
    "256m": dict(d_model=1024, n_layers=16, n_heads=16, d_mlp=2496, vocab_size=32000, context_length=2048),
    "small": dict(d_model=256, n_layers=6, n_heads=8, d_mlp=688, vocab_size=8192, context_length=512),
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, d_mlp=344, vocab_size=4096, context_length=256),
    "nano": dict(d_model=64, n_layers=2, n_heads=4, d_mlp=172, vocab_size=512, context_length=128),
}


class GPRegressorConfig(StrictModel):
    """The regressor of the GP study (``cemlab.models.gp.GPRegressor``): ``Linear(n_inputs ->
    latent_dim)``, ``n_layers`` recursive CEM MLP layers of hidden width ``hidden_dim`` with
    ``steps`` descent steps of size ``eta`` and preconditioner ``precond``, then
    ``Linear(latent_dim -> 1)``. Its fields are part of the flat ``gp:`` section of a run config
    (``cemlab.gp.config.GPConfig``, which adds the data draw).
    """

    n_inputs: int = Field(default=10, ge=1, description="Input dimension (paper: 10).")
    latent_dim: int = Field(default=64, ge=1, le=MAX_WIDTH, description="Width of the latent state the CEM layers act on.")
    hidden_dim: int | None = Field(
        default=None, ge=1, le=MAX_WIDTH, description="Hidden width D_v of each CEM MLP (None: 4 * latent_dim)."
    )
    n_layers: int = Field(default=1, ge=1, le=MAX_LAYERS, description="Recursive CEM MLP layers stacked in the latent space.")
    steps: int = Field(default=1, ge=1, le=MAX_STEPS, description="Recursion steps T of each CEM MLP (Table 3: 1, 2, 4, 8).")
    eta: float = Field(default=1.0, gt=0, le=MAX_ETA, description="Step size eta of each recursion step.")
    precond: Preconditioner = Field(default="none", description="Preconditioner P of the CEM MLP: none, diag or dplr.")
    precond_rank: int = Field(
        default=16, ge=1, description="Rank R of the dplr preconditioner (paper C.4: 16 for MLPs)."
    )
    norm_eps: float = Field(default=1e-6, gt=0, description="RMSNorm epsilon inside the CEM layers.")
    init_std: float = Field(default=0.02, gt=0, description="Std of the normal init of the CEM layer weights.")

    @property
    def cem_hidden_dim(self) -> int:
        """Hidden width D_v actually used (``hidden_dim`` or 4 * ``latent_dim``)."""
        return self.hidden_dim if self.hidden_dim is not None else 4 * self.latent_dim

    @model_validator(mode="after")
    def _check_combinations(self) -> "GPRegressorConfig":
        if self.precond == "dplr" and self.precond_rank >= self.latent_dim:
            raise ValueError(
                f"precond_rank={self.precond_rank} must be < latent_dim={self.latent_dim} (a low-rank "
                f"correction); lower precond_rank or use precond='diag'"
            )
        return self
