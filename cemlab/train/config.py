"""Training settings (paper Table 2 defaults). Pydantic only (no heavy imports)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cemlab.models.config import MAX_STEPS, NOT_IDENTITY  # MAX_STEPS: test time tries up to twice the trained steps

#: Upper bounds on the learning rate and the token budget a user may set: an AdamW peak rate
#: above 1 or a budget above 10^13 tokens is a typo, not an experiment (the paper: 5e-4 to 8e-3, 10^9).
MAX_LR, MAX_TOKENS = 1.0, 10**13


class TrainConfig(BaseModel):
    """Optimizer, schedule, batch, token budget, evaluation and checkpointing of one run."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

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
