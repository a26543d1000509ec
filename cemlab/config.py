"""Configuration: the model (``ModelConfig``), a whole run (``RunConfig``), YAML and overrides.

Every config is a pydantic model with ``extra="forbid"``: an unknown key, a wrong type or an
invalid combination raises ``pydantic.ValidationError`` whose message names the field and says
what is allowed, before any compute is spent.

Field names follow the usual Transformer spelling (``d_model``, ``n_layers``, ``n_heads``, ``d_mlp``,
``vocab_size``, ``context_length``, ``attention``, ``mlp``). Per-sublayer options carry an
``attn_`` or ``mlp_`` prefix so that a flattened config is a flat list of MLflow params.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cemlab.data.config import DataConfig
from cemlab.gp.config import GPConfig
from cemlab.train.config import TrainConfig

SublayerKind = Literal["llama", "cem"]
Preconditioner = Literal["none", "diag", "dplr"]
KQDiagonal = Literal["none", "shared", "per_head"]
AttnKernel = Literal["auto", "reference", "flex"]
#: A CEM step size: a fixed eta > 0, "1/T" (1/steps) or "learned" (softplus, per layer and step, from 1/T).
StepSize = Annotated[float, Field(gt=0)] | Literal["1/T", "learned"]


class StrictModel(BaseModel):
    """Base for every cemlab config: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class ModelConfig(StrictModel):
    """One causal language model: a Llama baseline, a CEM variant, or anything in between.

    Attention and MLP sublayers are chosen independently (``attention``/``mlp``). A CEM sublayer
    takes ``*_steps`` descent steps on its energy (paper eq. 3 / 9, recursion of section 2.3) with
    step size ``*_eta`` and preconditioner ``*_precond``. ``*_reuse`` applies the whole residual
    sub-block that many times (the paper's "plain layer reuse" control, Fig. 3c / 4).
    """

    name: str | None = Field(default=None, description="Preset this config came from, if any (e.g. '86m').")
    d_model: int = Field(default=64, ge=8, description="Residual stream width D.")
    n_layers: int = Field(default=2, ge=1, description="Number of Transformer blocks.")
    n_heads: int = Field(default=4, ge=1, description="Attention heads K; head width D/K.")
    d_mlp: int = Field(default=172, ge=1, description="MLP hidden width (Llama SwiGLU / CEM projection width D_v).")
    vocab_size: int = Field(default=512, ge=2, description="Vocabulary size.")
    context_length: int = Field(default=128, ge=2, description="Maximum sequence length.")

    attention: SublayerKind = Field(default="llama", description="Attention sublayer: 'llama' (RoPE MHA) or 'cem'.")
    mlp: SublayerKind = Field(default="llama", description="MLP sublayer: 'llama' (SwiGLU) or 'cem'.")

    attn_steps: int = Field(default=1, ge=1, description="CEM attention recursion steps T_eps (paper sec. 2.3).")
    mlp_steps: int = Field(default=1, ge=1, description="CEM MLP recursion steps T_xi.")
    attn_eta: StepSize = Field(
        default=1.0, description="CEM attention step size eta_eps: a number > 0 (every step), '1/T' (total step "
        "T*eta = 1 whatever T) or 'learned' (one positive scalar per layer and step, initialised to 1/T).")
    mlp_eta: StepSize = Field(default=1.0, description="CEM MLP step size eta_xi: a number > 0, '1/T' or 'learned'.")
    cem_x0: Literal["h", "rmsnorm"] = Field(
        default="h", description="Where a CEM sublayer's descent state starts: 'h' (the residual stream, x0 = h) or "
        "'rmsnorm' (x0 = RMSNorm(h), the residual absorbed into the recursion: Algorithm 1 read literally).")
    attn_precond: Preconditioner = Field(default="none", description="Per-head preconditioner P_k for CEM attention.")
    mlp_precond: Preconditioner = Field(default="none", description="Preconditioner P_mlp for the CEM MLP.")
    attn_precond_rank: int = Field(default=4, ge=1, description="Low rank R of the dplr attention preconditioner (paper C.4: 4).")
    mlp_precond_rank: int = Field(default=16, ge=1, description="Low rank R of the dplr MLP preconditioner (paper C.4: 16).")
    kq_diagonal: KQDiagonal = Field(default="none", description="Diagonal term of A_k = diag(d_k) + Wq_k^T Wk_k (sec. 2.3).")
    exact_energy_gradient: bool = Field(
        default=False,
        description="Add the diagonal's own gradient term sum_j alpha_ij d_k*h_j to the attention step. "
        "False is the paper's Algorithm 1 (diagonal in the scores only).",
    )
    attn_reuse: int = Field(default=1, ge=1, description="Plain reuse: apply the whole attention sub-block this many times.")
    mlp_reuse: int = Field(default=1, ge=1, description="Plain reuse: apply the whole MLP sub-block this many times.")
    mlp_param_matched: bool = Field(
        default=False, description="CEM MLP hidden width x1.5 so that it has as many parameters as the Llama MLP (Fig. 2b)."
    )
    alibi: bool = Field(default=True, description="ALiBi bias -m_k|i-j| in CEM attention (appendix A).")
    alibi_max_bias: float = Field(default=8.0, gt=0, description="ALiBi slopes m_k = 2^(-max_bias*k/K), k=1..K.")
    self_other_bias: bool = Field(default=True, description="Learnable self/other-token score biases in CEM attention.")
    attn_kernel: AttnKernel = Field(
        default="auto",
        description="CEM attention scores: 'reference' (SDPA with a materialised [K,S,S] bias), 'flex' "
        "(FlexAttention, biases as score_mod, causal block mask; training needs CUDA in torch 2.13) or "
        "'auto' (flex on CUDA, reference elsewhere). Same numbers either way (docs/performance.md).",
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


class TrackingConfig(StrictModel):
    """Where and under which names a run is recorded in MLflow."""

    experiment: str = Field(default="cemlab", description="MLflow experiment name.")
    run_name: str | None = Field(default=None, description="Readable run name; derived from the config when empty.")
    tags: dict[str, str] = Field(default_factory=dict, description="Extra MLflow tags.")
    parent_run_id: str | None = Field(default=None, description="Nest under this run (sweeps set it).")
    system_metrics: bool | None = Field(
        default=None, description="MLflow's system metrics (CPU, memory, GPU) on the run; None: on unless "
        "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=false.")
    log_model: bool | None = Field(
        default=None, description="Log the final model as an MLflow model (mlflow.pytorch); None: yes, except at "
        "the smoke scale.")


class RunConfig(StrictModel):
    """One training run: model + data + training + tracking. This is what ``cemlab train`` reads."""

    task: Literal["lm", "gp"] = Field(default="lm", description="'lm': language model; 'gp': GP regression (Table 3).")
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    gp: GPConfig | None = Field(default=None, description="GP study settings (task='gp'), see cemlab.gp.config.")

    @field_validator("model", mode="before")
    @classmethod
    def _resolve_preset(cls, v: Any) -> Any:
        # ``model: {preset: tiny, attention: cem}`` -> the preset's dims with the overrides on top.
        if isinstance(v, dict) and "preset" in v:
            v = dict(v)
            name = v.pop("preset")
            if name not in PRESETS:
                raise ValueError(f"model.preset={name!r} is unknown; choose one of {sorted(PRESETS)}")
            return {**PRESETS[name], "name": name, **v}
        return v

    @model_validator(mode="after")
    def _task_settings(self) -> "RunConfig":
        if self.task == "gp" and self.gp is None:
            raise ValueError("task='gp' needs a gp: section (kernel, latent_dim, steps, ...; see cemlab.gp.config.GPConfig)")
        if self.task == "lm" and self.gp is not None:
            raise ValueError("a gp: section needs task='gp' (it is ignored by language-model runs)")
        return self

    def hash(self) -> str:
        return config_hash(self)


# ---------------------------------------------------------------------------------------------
# Hashing, flattening, YAML and overrides
# ---------------------------------------------------------------------------------------------

#: Fields that do not change what a run computes, left out of the config hash, so that the same
#: trial started from two sweeps (or with another run name) is recognised as the same.
HASH_EXCLUDE = {"tracking", ("model", "name"), ("model", "checkpoint_recursion"), ("model", "attn_kernel"), ("train", "progress_bar"),
                ("train", "compile"), ("train", "checkpoint_dir"), ("train", "val_interval"),
                ("train", "checkpoint_every"), ("train", "num_threads"), ("train", "test_recursion_steps"),
                ("train", "devices"), ("train", "accelerator"),
                ("data", "cache_dir")}


#: Fields added after runs were made, left out of the hash while at these defaults, so that the
#: runs made before they existed (which computed exactly that) still match their grid cells.
HASH_OMIT_AT_DEFAULT = {("model", "cem_x0"): "h"}


def _hashable_dict(cfg: BaseModel) -> dict[str, Any]:
    d = cfg.model_dump(mode="json")
    for (sec, key), default in HASH_OMIT_AT_DEFAULT.items():
        if isinstance(d.get(sec), dict) and d[sec].get(key, default) == default:
            d[sec].pop(key, None)
    for item in HASH_EXCLUDE:
        if isinstance(item, str):
            d.pop(item, None)
        else:
            sec, key = item
            if isinstance(d.get(sec), dict):
                d[sec].pop(key, None)
    return d


def config_hash(cfg: BaseModel, length: int = 12) -> str:
    """Stable hash of everything that changes a run's result (names and I/O paths left out)."""
    payload = json.dumps(_hashable_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"d_model": 64}}`` -> ``{"model.d_model": 64}`` (lists kept as JSON strings)."""
    if isinstance(d, BaseModel):
        d = d.model_dump(mode="json")
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"model.attn_steps=2"`` -> (["model", "attn_steps"], 2); values are parsed as YAML."""
    if "=" not in text:
        raise ValueError(f"override {text!r} must look like section.field=value (e.g. model.attn_steps=2)")
    key, _, raw = text.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ValueError(f"override {text!r} has an empty key")
    return path, yaml.safe_load(raw) if raw.strip() else None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides to a nested dict (returns a new dict)."""
    data = json.loads(json.dumps(data))
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for p in path[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {text!r}: {p!r} is not a section")
        node[path[-1]] = value
    return data


def load_run_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a run config from YAML (or the defaults when ``path`` is None) and apply overrides.

    Errors name the file and the offending key."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {p} does not exist")
        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{p}: the top level must be a mapping of sections (model, data, train, tracking)")
        data = loaded
    data = apply_overrides(data, overrides or [])
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source=str(path) if path else "config")) from None


class ConfigError(ValueError):
    """A config could not be validated; the message names the source, the key and the fix."""


def format_validation_error(e: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            valid = _valid_keys(tuple(str(x) for x in err["loc"][:-1]))
            close = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1)
            msg = (f"unknown key; did you mean {'.'.join([*map(str, err['loc'][:-1]), close[0]])!r}?" if close
                   else f"unknown key; valid keys here: {', '.join(valid)}" if valid
                   else "unknown key; check its spelling against the documented fields")
        lines.append(f"  - {loc}: {msg}")
    return "\n".join(lines)


def _valid_keys(loc: tuple[str, ...]) -> list[str]:
    """Field names of the config section at ``loc`` in ``RunConfig`` (for did-you-mean hints)."""
    node: Any = RunConfig
    for part in loc:
        fields = getattr(node, "model_fields", {})
        if part not in fields:
            return []
        ann = fields[part].annotation
        node = next((a for a in (*getattr(ann, "__args__", ()), ann) if isinstance(a, type) and issubclass(a, BaseModel)),
                    None)
        if node is None:
            return []
    return list(getattr(node, "model_fields", {}))


def config_sections() -> list[tuple[str, str]]:
    """``(section, first line of its documentation)`` of a run config, for ``cemlab train --help``."""
    out = []
    for name, f in RunConfig.model_fields.items():
        ann = f.annotation
        model = next((a for a in (*getattr(ann, "__args__", ()), ann) if isinstance(a, type) and issubclass(a, BaseModel)),
                     None)
        doc = (model.__doc__ or "").strip().split("\n")[0] if model is not None else (f.description or "")
        out.append((name, doc))
    return out
