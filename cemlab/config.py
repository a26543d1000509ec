"""Configuration: a whole run (``RunConfig``), its hash, YAML and overrides.

Every config is a pydantic model with ``extra="forbid"``: an unknown key, a wrong type or an
invalid combination raises ``pydantic.ValidationError`` whose message names the field and says
what is allowed, before any compute is spent. The model's section (``ModelConfig``, its size
``PRESETS``, the ``StrictModel`` base) lives with the model library in ``cemlab.models.config``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from cemlab.data.config import DataConfig
from cemlab.gp.config import GPConfig
from cemlab.models.config import MAX_STEPS, NOT_IDENTITY, OMIT_AT_DEFAULT, PRESETS, ModelConfig, StrictModel, identity_of, input_keys
from cemlab.task_registry import TASKS


# Training settings (paper Table 2 defaults). MAX_STEPS: test time tries up to twice the trained steps.

#: Upper bounds on the learning rate and the token budget a user may set: an AdamW peak rate
#: above 1 or a budget above 10^13 tokens is a typo, not an experiment (the paper: 5e-4 to 8e-3, 10^9).
MAX_LR, MAX_TOKENS = 1.0, 10**13


class TrainConfig(StrictModel):
    """Optimizer, schedule, batch, token budget, evaluation and checkpointing of one run."""

    lr: float = Field(default=2e-3, gt=0, le=MAX_LR, description="Peak learning rate (AdamW).")
    betas: tuple[float, float] = Field(default=(0.9, 0.95), description="AdamW betas.")
    eps: float = Field(default=1e-9, gt=0, description="AdamW epsilon.")
    weight_decay: float = Field(default=0.1, ge=0, description="Weight decay, applied to matrices only.")
    grad_clip: float = Field(default=1.0, gt=0, description="Gradient norm clipping.")
    warmup_frac: float = Field(default=0.05, ge=0, lt=1, description="Linear warmup, share of the total steps.")
    final_lr_factor: float = Field(default=0.1, ge=0, le=1, description="Cosine schedule ends at lr * this.")
    batch_size: int = Field(default=128, ge=1, le=1 << 20, description="Effective batch in sequences (paper: 128).")
    micro_batch_size: int = Field(default=8, ge=1, le=1 << 20, description="Sequences per forward pass; the rest is gradient accumulation.")
    tokens: Literal["chinchilla"] | Annotated[int, Field(ge=1, le=MAX_TOKENS)] = Field(
        default="chinchilla",
        description="'chinchilla': 20 tokens per parameter of the matched Llama baseline; or a number of tokens. "
        "For task='gp' the unit is one example (and 'chinchilla' counts the regressor's own parameters).",
    )
    max_steps: int | None = Field(default=None, ge=1, le=10**9, description="Cap on optimizer steps (overrides the token budget when smaller).")
    seed: int = Field(default=0, description="Seed of initialisation, data order and dropout.")
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed"] = Field(
        default="auto", description="'auto': bf16-mixed on GPU, fp32 on CPU."
    )
    compile: Literal["auto"] | bool = Field(json_schema_extra=NOT_IDENTITY,
        default="auto", description="torch.compile the model; 'auto': on a GPU only (on the CPU, compile time "
        "outweighs the gain at CPU sizes, and FlexAttention trains only on CUDA).")

    def compiles(self, accelerator: str) -> bool:
        """Whether ``compile`` means compiling on ``accelerator`` ('gpu' or 'cpu')."""
        return self.compile is True or (self.compile == "auto" and accelerator == "gpu")
    val_interval: int = Field(json_schema_extra=NOT_IDENTITY, default=50, ge=1, le=10**9, description="Validate every this many optimizer steps.")
    val_batches: int = Field(default=8, ge=1, le=10**6, description="Validation batches per evaluation.")
    test_batches: int | None = Field(default=None, ge=1, le=10**6, description="Test batches at the end (None: the whole test split).")
    curve_batches: int | None = Field(
        default=None, ge=1, le=10**6, json_schema_extra=OMIT_AT_DEFAULT,
        description="Test batches of the test-time recursion curve (test/ppl_at_steps), every T' on the same "
        "batches, T' = T included (None: the test batches, and T' = T reuses the test metric). At most "
        "test_batches; fewer makes the curve cheaper (docs/performance.md, 'Evaluation sized to its precision').")
    test_recursion_steps: list[int] | None = Field(json_schema_extra=NOT_IDENTITY,
        default=None, description="Recursion steps tried at test time only (CEM); None: 1..2T."
    )
    # Also: the environment variable CEMLAB_INJECT_NAN_STEP=k makes the loss of optimizer step k
    # NaN (a test hook for divergence handling; not a field, so it never enters the config hash).
    checkpoint_every: int = Field(json_schema_extra=NOT_IDENTITY, default=100, ge=1, le=10**9, description="Save a checkpoint every this many optimizer steps.")
    checkpoint_dir: str | None = Field(json_schema_extra=NOT_IDENTITY, default=None, description="Checkpoint folder; defaults to <runs>/checkpoints/<hash>.")
    num_threads: int | None = Field(json_schema_extra=NOT_IDENTITY, default=None, ge=1, le=4096, description="torch CPU threads (None: leave as is).")
    progress_bar: bool | None = Field(json_schema_extra=NOT_IDENTITY, default=None, description="Show a progress bar (None: when interactive).")
    accelerator: Literal["auto", "cpu", "gpu"] = Field(json_schema_extra=NOT_IDENTITY, default="auto", description="Lightning accelerator.")
    devices: int = Field(json_schema_extra=NOT_IDENTITY, default=1, ge=1, le=4096, description="Devices (processes) for DDP.")

    @field_validator("test_recursion_steps")
    @classmethod
    def _steps(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or min(v) < 1 or max(v) > 2 * MAX_STEPS):
            raise ValueError(f"test_recursion_steps={v} must be a non-empty list of steps from 1 to "
                             f"{2 * MAX_STEPS} (or null for 1..2T)")
        return v

    @field_validator("micro_batch_size")
    @classmethod
    def _micro(cls, v: int, info) -> int:
        bs = info.data.get("batch_size")
        if bs is not None and bs % v != 0:
            raise ValueError(
                f"micro_batch_size={v} must divide batch_size={bs} (the remainder would be silently dropped); "
                f"pick a divisor of {bs}"
            )
        return v

    @field_validator("curve_batches")
    @classmethod
    def _curve(cls, v: int | None, info) -> int | None:
        tb = info.data.get("test_batches")
        if v is not None and tb is not None and v > tb:
            raise ValueError(
                f"curve_batches={v} must be at most test_batches={tb} (the test-time curve is read beside the "
                f"test metric and never needs more batches than it); lower curve_batches or leave it null")
        return v


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

    task: str = Field(default="lm", description="The task, by name (cemlab.task_registry): 'lm': language model; "
                      "'gp': GP regression (Table 3); or a task a plugin registers.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, json_schema_extra=NOT_IDENTITY)
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

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        TASKS.get(v)  # an unknown name fails naming the tasks there are
        return v

    @model_validator(mode="after")
    def _task_settings(self) -> "RunConfig":
        """A task's own section (``Task.section``, e.g. ``gp:``) is given exactly when the task is run.
        The optional sections (default None) are kept in every config's payload: ``gp: null``."""
        own = TASKS.get(self.task).section
        for name, f in type(self).model_fields.items():
            if f.default is not None or name == own and getattr(self, name) is not None:
                continue
            if name == own:
                section = f.annotation.__args__[0] if hasattr(f.annotation, "__args__") else f.annotation
                raise ValueError(f"task={self.task!r} needs a {name}: section ({', '.join(list(section.model_fields)[:3])}, "
                                 f"...; see {section.__module__}.{section.__name__})")
            if getattr(self, name) is not None:
                users = [t for t, task in TASKS.items() if task.section == name]
                raise ValueError(f"a {name}: section needs task={(users[0] if len(users) == 1 else users)!r}"
                                 f"{'' if len(users) == 1 else ' (one of them)'}; task={self.task!r} ignores it: remove it")
        return self

    def hash(self) -> str:
        return config_hash(self)


# ---------------------------------------------------------------------------------------------
# Hashing, flattening, YAML and overrides
# ---------------------------------------------------------------------------------------------

def _hashable_dict(cfg: BaseModel) -> dict[str, Any]:
    """The config as JSON with what is not the run's identity left out: each field says so where it is
    declared (``NOT_IDENTITY``, ``OMIT_AT_DEFAULT`` in ``cemlab.models.config``)."""
    return _identity(cfg, cfg.model_dump(mode="json"))


def _identity(cfg: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    fields = cfg.serialized_fields() if hasattr(cfg, "serialized_fields") else type(cfg).model_fields
    out: dict[str, Any] = {}
    for key, value in dumped.items():
        field = fields.get(key)
        mark = identity_of(field) if field is not None else True
        if mark is False or (mark == "omit_at_default" and value == field.default):
            continue
        section = getattr(cfg, key, None)
        out[key] = _identity(section, value) if isinstance(section, BaseModel) and isinstance(value, dict) else value
    return out


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
            valid = valid_keys(tuple(str(x) for x in err["loc"][:-1]))
            close = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1)
            msg = (f"unknown key; did you mean {'.'.join([*map(str, err['loc'][:-1]), close[0]])!r}?" if close
                   else f"unknown key; valid keys here: {', '.join(valid)}" if valid
                   else "unknown key; check its spelling against the documented fields")
        lines.append(f"  - {loc}: {msg}")
    return "\n".join(lines)


def valid_keys(loc: tuple[str, ...]) -> list[str]:
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
    return input_keys(node) if node is not None else []


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
