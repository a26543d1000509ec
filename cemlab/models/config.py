"""The models' configuration: a causal language model (``ModelConfig`` and its size ``PRESETS``)
and the GP study's regressor (``GPRegressorConfig``).

Every config is a pydantic model with ``extra="forbid"``: an unknown key, a wrong type or an
invalid combination raises ``pydantic.ValidationError`` whose message names the field and says
what is allowed, before any compute is spent. This module depends on pydantic and the model
library's own registries only, so the model library stays self-contained; a run's config
(``cemlab.config.RunConfig``) and the GP study's ``gp:`` section (``cemlab.gp.config.GPConfig``) are
built on these classes.

Field names follow the usual Transformer spelling (``d_model``, ``n_layers``, ``n_heads``, ``d_mlp``,
``vocab_size``, ``context_length``). The options of each sublayer are one nested config,
``cfg.attention`` (``AttentionConfig``) and ``cfg.mlp`` (``MLPConfig``), read as
``cfg.attention.kind``, ``cfg.mlp.steps``. Written out (``model_dump``, YAML, MLflow params, the
config hash) and read in, they keep their flat spelling with an ``attn_`` or ``mlp_`` prefix
(``attention: cem``, ``attn_steps: 2``, ``mlp_precond: dplr``): ``ModelConfig.FLAT`` maps each flat
key to its place. Nested input (``attention: {kind: cem, steps: 2}``) is accepted too.

Run identity is declared at the field: ``json_schema_extra=NOT_IDENTITY`` leaves a field out of the
config hash (it does not change what a run computes), ``OMIT_AT_DEFAULT`` leaves it out while at its
default (a field added after runs were made); ``cemlab.config.config_hash`` walks the fields.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator,
)


def preconditioner_kind(name: str, field: str) -> str:
    """``cemlab.models.preconditioners.preconditioner_kind``, imported when a config is validated
    (the kinds are torch modules: reading this file does not load torch)."""
    from cemlab.models.preconditioners import preconditioner_kind as kind

    return kind(name, field)


def _preconditioner(kind: str):
    from cemlab.models.preconditioners import PRECONDITIONERS

    return PRECONDITIONERS.get(kind)

SublayerKind = Literal["llama", "cem"]
KQDiagonal = Literal["none", "shared", "per_head"]
AttnKernel = Literal["auto", "reference", "flash", "flex"]
#: A CEM step size: a fixed eta > 0, "1/T" (1/steps) or "learned" (softplus, per layer and step, from 1/T).
#: Upper bounds on what a user may set: far above any experiment of the paper, below what would
#: exhaust memory or make a run meaningless (a typo like attn_steps=1000000 is refused, not run).
MAX_STEPS, MAX_ETA, MAX_WIDTH, MAX_LAYERS = 64, 10.0, 1 << 18, 1024
StepSize = Annotated[float, Field(gt=0, le=MAX_ETA)] | Literal["1/T", "learned"]

#: ``json_schema_extra`` of a field that is not part of a run's identity: it does not change what a
#: run computes (a name, a path, a kernel choice), so the config hash leaves it out and the same
#: trial started from two sweeps (or with another run name) is recognised as the same.
NOT_IDENTITY: dict[str, Any] = {"identity": False}
#: ``json_schema_extra`` of a field added after runs were made: left out of the hash while at its
#: default, so that the runs made before it existed (which computed exactly that) keep their hash.
OMIT_AT_DEFAULT: dict[str, Any] = {"identity": "omit_at_default"}


def identity_of(field: Any) -> bool | str:
    """A field's place in the run identity: True, False (``NOT_IDENTITY``) or ``"omit_at_default"``."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return extra.get("identity", True)


def input_keys(model: type[BaseModel]) -> list[str]:
    """The keys a config class reads and writes: ``ModelConfig``'s flat spelling, else its fields."""
    return list(getattr(model, "FLAT", None) or model.model_fields)


class StrictModel(BaseModel):
    """Base for every cemlab config: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)


class SublayerConfig(StrictModel):
    """What every sublayer has: its kind, CEM recursion steps, step size, preconditioner, reuse.

    ``FLAT`` maps each field to its flat (serialized) name. Compare ``cfg.attention.kind`` with a
    string, never the config itself: ``cfg.attention == "cem"`` raises ``TypeError``."""

    FLAT: ClassVar[dict[str, str]] = {}

    kind: SublayerKind = Field(default="llama", description="'llama' or 'cem'.")
    steps: int = Field(default=1, ge=1, le=MAX_STEPS, description="CEM recursion steps T (paper sec. 2.3).")
    eta: StepSize = Field(
        default=1.0, description="CEM step size eta: a number > 0 (every step), '1/T' (total step T*eta = 1 "
        "whatever T) or 'learned' (one positive scalar per layer and step, initialised to 1/T).")
    precond: str = Field(default="none", description="Preconditioner kind: a name registered in "
                         "cemlab.models.preconditioners.PRECONDITIONERS (none, diag, dplr, or a plugin's).")
    precond_rank: int = Field(default=4, ge=1, le=MAX_WIDTH, description="Low rank R of a dplr preconditioner.")
    reuse: int = Field(default=1, ge=1, le=MAX_STEPS, description="Plain reuse: apply the whole sub-block this many times.")

    @field_validator("precond")
    @classmethod
    def _known_precond(cls, v: str) -> str:
        return preconditioner_kind(v, cls.FLAT.get("precond", "precond"))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            raise TypeError(f"comparing {type(self).__name__} with the string {other!r}: compare its kind "
                            f"(e.g. cfg.{self.FLAT['kind']}.kind == {other!r})")
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like every config


class AttentionConfig(SublayerConfig):
    """The attention sublayer (flat keys ``attention``, ``attn_*``, ``kq_diagonal``, ``alibi*``, ...).

    A CEM sublayer takes ``steps`` descent steps on its energy (paper eq. 3, recursion of section
    2.3) with step size ``eta`` and preconditioner ``precond`` (one P_k per head)."""

    FLAT: ClassVar[dict[str, str]] = {
        "kind": "attention", "steps": "attn_steps", "eta": "attn_eta", "precond": "attn_precond",
        "precond_rank": "attn_precond_rank", "reuse": "attn_reuse", "kq_diagonal": "kq_diagonal",
        "exact_energy_gradient": "exact_energy_gradient", "alibi": "alibi", "alibi_max_bias": "alibi_max_bias",
        "self_other_bias": "self_other_bias", "kernel": "attn_kernel", "rope_theta": "rope_theta"}

    kind: SublayerKind = Field(default="llama", description="Attention sublayer: 'llama' (RoPE MHA) or 'cem'.")
    steps: int = Field(default=1, ge=1, le=MAX_STEPS, description="CEM attention recursion steps T_eps (paper sec. 2.3).")
    precond_rank: int = Field(default=4, ge=1, le=MAX_WIDTH, description="Low rank R of the dplr attention preconditioner (paper C.4: 4).")
    kq_diagonal: KQDiagonal = Field(default="none", description="Diagonal term of A_k = diag(d_k) + Wq_k^T Wk_k (sec. 2.3).")
    exact_energy_gradient: bool = Field(
        default=False,
        description="Add the diagonal's own gradient term sum_j alpha_ij d_k*h_j to the attention step. "
        "False is the paper's Algorithm 1 (diagonal in the scores only).",
    )
    alibi: bool = Field(default=True, description="ALiBi bias -m_k|i-j| in CEM attention (appendix A).")
    alibi_max_bias: float = Field(default=8.0, gt=0, description="ALiBi slopes m_k = 2^(-max_bias*k/K), k=1..K.")
    self_other_bias: bool = Field(default=True, description="Learnable self/other-token score biases in CEM attention.")
    kernel: AttnKernel = Field(
        default="auto", json_schema_extra=NOT_IDENTITY,
        description="CEM attention scores (flat key attn_kernel): 'reference' (SDPA with a materialised [K,S,S] "
        "bias that carries the self/other bias's gradient), 'flash' (CPU: the same bias held constant so that "
        "SDPA's flash kernel runs, the self/other bias's gradient from its log-sum-exp), 'flex' (FlexAttention, "
        "biases as score_mod, causal block mask; training needs CUDA in torch 2.13) or 'auto' (flex on CUDA where "
        "the heads stay narrow and the run compiles, flash on CPU without a KQ diagonal, reference elsewhere). Same numbers either way "
        "(docs/performance.md).",
    )
    rope_theta: float = Field(default=10000.0, gt=0, description="RoPE base for Llama attention.")


class MLPConfig(SublayerConfig):
    """The MLP sublayer (flat keys ``mlp``, ``mlp_*``): a CEM MLP takes ``steps`` descent steps on its
    element-wise energy (paper eq. 9, 13) with preconditioner ``precond``."""

    FLAT: ClassVar[dict[str, str]] = {
        "kind": "mlp", "steps": "mlp_steps", "eta": "mlp_eta", "precond": "mlp_precond",
        "precond_rank": "mlp_precond_rank", "reuse": "mlp_reuse", "param_matched": "mlp_param_matched"}

    kind: SublayerKind = Field(default="llama", description="MLP sublayer: 'llama' (SwiGLU) or 'cem'.")
    steps: int = Field(default=1, ge=1, le=MAX_STEPS, description="CEM MLP recursion steps T_xi.")
    precond_rank: int = Field(default=16, ge=1, le=MAX_WIDTH, description="Low rank R of the dplr MLP preconditioner (paper C.4: 16).")
    param_matched: bool = Field(
        default=False, description="CEM MLP hidden width x1.5 so that it has as many parameters as the Llama MLP (Fig. 2b)."
    )


#: The sublayer configs by their field in ``ModelConfig``.
SUBLAYERS: dict[str, type[SublayerConfig]] = {"attention": AttentionConfig, "mlp": MLPConfig}


class ModelConfig(StrictModel):
    """One causal language model: a Llama baseline, a CEM variant, or anything in between.

    Attention and MLP sublayers are chosen independently (``attention.kind``/``mlp.kind``, flat
    ``attention``/``mlp``). A CEM sublayer takes ``steps`` descent steps on its energy (paper eq. 3 /
    9, recursion of section 2.3) with step size ``eta`` and preconditioner ``precond``. ``reuse``
    applies the whole residual sub-block that many times (the paper's "plain layer reuse" control,
    Fig. 3c / 4). Serialized flat (``FLAT``, in this order): see the module docstring.
    """

    #: Flat (serialized) key -> where it lives: a field of this class, or (sublayer, field).
    FLAT: ClassVar[dict[str, str | tuple[str, str]]] = {
        **{k: k for k in ("name", "d_model", "n_layers", "n_heads", "d_mlp", "vocab_size", "context_length")},
        "attention": ("attention", "kind"), "mlp": ("mlp", "kind"), "attn_steps": ("attention", "steps"),
        "mlp_steps": ("mlp", "steps"), "attn_eta": ("attention", "eta"), "mlp_eta": ("mlp", "eta"), "cem_x0": "cem_x0",
        "attn_precond": ("attention", "precond"), "mlp_precond": ("mlp", "precond"),
        "attn_precond_rank": ("attention", "precond_rank"), "mlp_precond_rank": ("mlp", "precond_rank"),
        "kq_diagonal": ("attention", "kq_diagonal"), "exact_energy_gradient": ("attention", "exact_energy_gradient"),
        "attn_reuse": ("attention", "reuse"), "mlp_reuse": ("mlp", "reuse"), "mlp_param_matched": ("mlp", "param_matched"),
        "alibi": ("attention", "alibi"), "alibi_max_bias": ("attention", "alibi_max_bias"),
        "self_other_bias": ("attention", "self_other_bias"), "attn_kernel": ("attention", "kernel"),
        "rope_theta": ("attention", "rope_theta"),
        **{k: k for k in ("norm_eps", "init_std", "checkpoint_recursion")},
    }

    name: str | None = Field(default=None, json_schema_extra=NOT_IDENTITY,
                             description="Preset this config came from, if any (e.g. '86m').")
    d_model: int = Field(default=64, ge=8, le=MAX_WIDTH, description="Residual stream width D.")
    n_layers: int = Field(default=2, ge=1, le=MAX_LAYERS, description="Number of Transformer blocks.")
    n_heads: int = Field(default=4, ge=1, le=MAX_LAYERS, description="Attention heads K; head width D/K.")
    d_mlp: int = Field(default=172, ge=1, le=MAX_WIDTH, description="MLP hidden width (Llama SwiGLU / CEM projection width D_v).")
    vocab_size: int = Field(default=512, ge=2, le=1 << 21, description="Vocabulary size.")
    context_length: int = Field(default=128, ge=2, le=1 << 20, description="Maximum sequence length.")

    attention: AttentionConfig = Field(default_factory=AttentionConfig, description="The attention sublayer's options.")
    mlp: MLPConfig = Field(default_factory=MLPConfig, description="The MLP sublayer's options.")
    cem_x0: Literal["h", "rmsnorm"] = Field(
        default="h", json_schema_extra=OMIT_AT_DEFAULT,
        description="Where a CEM sublayer's descent state starts: 'h' (the residual stream, x0 = h) or "
        "'rmsnorm' (x0 = RMSNorm(h), the residual absorbed into the recursion: Algorithm 1 read literally).")
    norm_eps: float = Field(default=1e-6, gt=0, description="RMSNorm epsilon (Hugging Face Llama default 1e-6).")
    init_std: float = Field(default=0.02, gt=0, description="Std of the normal init of linear and embedding weights.")
    checkpoint_recursion: bool = Field(
        default=False, json_schema_extra=NOT_IDENTITY,
        description="Activation checkpointing per recursion step (memory of T=1 plus a little)."
    )

    # -- the flat spelling: in, out, and in error messages ----------------------------------------
    @model_validator(mode="wrap")
    @classmethod
    def _from_flat(cls, data: Any, handler: Any) -> "ModelConfig":
        """Flat keys (``attn_steps: 2``) into the nested sublayer configs; errors named flat again."""
        try:
            return handler(cls._nest(data) if isinstance(data, dict) else data)
        except ValidationError as e:
            raise ValidationError.from_exception_data(e.title, [
                {"type": err["type"], "loc": _flat_loc(err["loc"]), "input": err["input"], "ctx": err.get("ctx", {})}
                for err in e.errors()]) from None

    @classmethod
    def _nest(cls, data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        subs: dict[str, dict[str, Any]] = {s: {} for s in SUBLAYERS}
        for key, value in data.items():
            if key in SUBLAYERS and isinstance(value, (dict, SublayerConfig)):
                nested = value.model_dump() if isinstance(value, SublayerConfig) else value
                for name, v in nested.items():
                    if name in subs[key] and subs[key][name] != v:
                        raise ValueError(f"{SUBLAYERS[key].FLAT.get(name, name)} is given twice, with two values")
                    subs[key][name] = v
            elif isinstance(cls.FLAT.get(key), tuple):
                sub, name = cls.FLAT[key]
                if name in subs[sub] and subs[sub][name] != value:
                    raise ValueError(f"{key} is given twice (flat and nested), with two values")
                subs[sub][name] = value
            else:
                out[key] = value
        return {**out, **{s: d for s, d in subs.items() if d}}

    @model_serializer(mode="wrap")
    def _to_flat(self, handler: Any) -> dict[str, Any]:
        d = handler(self)
        for sub in SUBLAYERS:
            nested = d.pop(sub, None)
            if isinstance(nested, dict):
                d.update({SUBLAYERS[sub].FLAT[name]: v for name, v in nested.items()})
        return {k: d[k] for k in self.FLAT if k in d}

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> "ModelConfig":
        """A copy; ``update`` (flat or nested keys) is validated like any input."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate({**self.model_dump(), **update})

    @classmethod
    def serialized_fields(cls) -> dict[str, Any]:
        """Flat key -> its pydantic ``FieldInfo`` (where identity is declared), in serialized order."""
        return {k: (cls.model_fields[p] if isinstance(p, str) else SUBLAYERS[p[0]].model_fields[p[1]])
                for k, p in cls.FLAT.items()}

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def cem_mlp_width(self) -> int:
        """Width D_v of the CEM MLP projections (x1.5 when parameter-matched)."""
        return (self.d_mlp * 3) // 2 if self.mlp.param_matched else self.d_mlp

    @property
    def kind(self) -> str:
        """Short label of the model family: llama, cem-attn, cem-mlp or cem."""
        attn, mlp = self.attention.kind == "cem", self.mlp.kind == "cem"
        return "cem" if attn and mlp else "cem-attn" if attn else "cem-mlp" if mlp else "llama"

    def matched_baseline(self) -> "ModelConfig":
        """The Llama baseline with the same dimensions (its parameters set the Chinchilla budget
        that every variant of it trains on)."""
        keep = ("d_model", "n_layers", "n_heads", "d_mlp", "vocab_size", "context_length", "rope_theta",
                "norm_eps", "init_std")
        flat = self.model_dump()
        return ModelConfig(name=self.name, **{k: flat[k] for k in keep})

    @model_validator(mode="after")
    def _check_combinations(self) -> "ModelConfig":
        errors: list[str] = []
        a, m = self.attention, self.mlp
        if self.d_model % self.n_heads != 0:
            errors.append(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: choose n_heads among "
                f"the divisors of d_model ({_divisors(self.d_model)})"
            )
        elif (self.d_model // self.n_heads) % 2 != 0 and a.kind == "llama":
            errors.append(
                f"head width d_model/n_heads={self.d_model // self.n_heads} is odd: RoPE needs an even head width"
            )
        for sub in (a, m):
            problem = _preconditioner(sub.precond).check_width(self.d_model, sub.precond_rank, "d_model",
                                                                    sub.FLAT["precond_rank"])
            if problem:
                errors.append(problem)
        if a.kind == "llama":
            for f, default in (("steps", 1), ("precond", "none"), ("kq_diagonal", "none")):
                if getattr(a, f) != default:
                    errors.append(
                        f"{a.FLAT[f]}={getattr(a, f)!r} needs attention='cem' (Llama attention has no energy "
                        f"recursion, preconditioner or KQ diagonal); use attn_reuse for plain reuse"
                    )
        if m.kind == "llama":
            for f, default in (("steps", 1), ("precond", "none"), ("param_matched", False)):
                if getattr(m, f) != default:
                    errors.append(
                        f"{m.FLAT[f]}={getattr(m, f)!r} needs mlp='cem'; use mlp_reuse for plain reuse of a Llama MLP"
                    )
        if a.exact_energy_gradient and a.kq_diagonal == "none":
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
    precond: str = Field(default="none", description="Preconditioner P of the CEM MLP: none, diag, dplr or a "
                         "plugin's kind (cemlab.models.preconditioners.PRECONDITIONERS).")
    precond_rank: int = Field(
        default=16, ge=1, description="Rank R of the dplr preconditioner (paper C.4: 16 for MLPs)."
    )
    norm_eps: float = Field(default=1e-6, gt=0, description="RMSNorm epsilon inside the CEM layers.")
    init_std: float = Field(default=0.02, gt=0, description="Std of the normal init of the CEM layer weights.")

    @property
    def cem_hidden_dim(self) -> int:
        """Hidden width D_v actually used (``hidden_dim`` or 4 * ``latent_dim``)."""
        return self.hidden_dim if self.hidden_dim is not None else 4 * self.latent_dim

    @field_validator("precond")
    @classmethod
    def _known_precond(cls, v: str) -> str:
        return preconditioner_kind(v, "precond")

    @model_validator(mode="after")
    def _check_combinations(self) -> "GPRegressorConfig":
        problem = _preconditioner(self.precond).check_width(self.latent_dim, self.precond_rank, "latent_dim",
                                                                 "precond_rank")
        if problem:
            raise ValueError(problem)
        return self


def _flat_loc(loc: tuple) -> tuple:
    """``("attention", "steps", ...)`` -> ``("attn_steps", ...)``: errors name the flat key a user wrote."""
    if len(loc) >= 2 and loc[0] in SUBLAYERS and loc[1] in SUBLAYERS[loc[0]].FLAT:
        return (SUBLAYERS[loc[0]].FLAT[loc[1]], *loc[2:])
    return loc
