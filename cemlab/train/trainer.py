"""The Lightning ``Trainer`` of a run and the device it runs on: accelerator and precision, the
device's peak FLOP/s (for MFU), whether to draw a progress bar, and Lightning kept quiet.

Used by ``train`` (:mod:`cemlab.train.run`), the LightningModule (which compiles the model only
on an accelerator that compiles) and the training-loop benchmark. Lightning and Ray Train are
imported inside :func:`build_trainer`, so ``cemlab bench train``, which imports this module, loads
Lightning only for its Lightning loop.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

import torch

from cemlab.config import ConfigError, RunConfig
from cemlab.hardware import peak_flops
from cemlab.paths import compile_cache_dir


def accelerator_and_precision(cfg: RunConfig) -> tuple[str, str]:
    t = cfg.train
    cuda = torch.cuda.is_available()
    if t.accelerator == "gpu" and not cuda:
        raise ConfigError("train.accelerator='gpu' but no CUDA device is visible; use 'auto' or 'cpu'")
    accelerator = "gpu" if (t.accelerator == "gpu" or (t.accelerator == "auto" and cuda)) else "cpu"
    if t.precision == "auto":
        return accelerator, "bf16-mixed" if accelerator == "gpu" else "32-true"
    return accelerator, t.precision


def device_peak_flops(accelerator: str, precision: str = "bf16-mixed") -> float | None:
    """The device's peak FLOP/s at ``precision`` (None on the CPU or an unknown GPU)."""
    if accelerator != "gpu":
        return None

    return peak_flops(precision=precision)


#: torch.compile's on-disk caches (inductor's FX graph, autograd and autotuning caches; Triton's
#: kernels on a GPU), and where ``use_compile_cache`` puts them under ``<runs>/compile-cache``.
COMPILE_CACHE_ENV = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def use_compile_cache() -> dict[str, str]:
    """Point torch.compile's on-disk caches at the runs folder (``cemlab.paths.compile_cache_dir``)
    in this process, unless the environment names other folders: every run and every sweep trial
    of the runs folder, on any node that shares it, then compiles a shape once and reads it back
    after (a reused worker's next trial, another trial process, a resumed run). Inductor's default
    is a folder under /tmp, per machine and lost with a container; inductor writes that default
    into the environment the first time it compiles, so that value counts as unset. Returns the
    variables as set."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # torch._inductor: seconds to import

    root = compile_cache_dir()
    for var, sub in COMPILE_CACHE_ENV.items():
        if os.environ.get(var) in (None, "", os.path.abspath(default_cache_dir())):
            os.environ[var] = str(root / sub)
    return {var: os.environ[var] for var in COMPILE_CACHE_ENV}


def show_progress_bar(cfg: RunConfig, override: bool | None) -> bool:
    """``override``, else ``train.progress_bar``, else whether stderr is a terminal."""
    if override is not None:
        return override
    if cfg.train.progress_bar is not None:
        return cfg.train.progress_bar
    return sys.stderr.isatty()


def build_trainer(cfg: RunConfig, plan, accelerator: str, precision: str, callbacks: list, folder,
                  progress_bar: bool, ray_train: bool = False):
    """The ``lightning.Trainer`` of a run: one epoch of ``plan.total_steps`` optimizer steps over the
    resumable loader; validation, checkpoints and logging come from cemlab's callbacks, so
    Lightning's own loops for them, its loggers and its checkpointing are off.

    ``ray_train``: inside a Ray Train worker, DDP over the process group Ray set up (Ray's
    Lightning strategy and cluster environment, one device per worker, checked by
    ``ray.train.lightning.prepare_trainer``); otherwise ``train.devices`` processes started by
    Lightning."""
    import lightning as L

    placement: dict = {"devices": cfg.train.devices}
    if ray_train:
        from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment

        placement = {"devices": "auto", "strategy": RayDDPStrategy(), "plugins": [RayLightningEnvironment()]}
    with quiet_lightning():
        trainer = L.Trainer(
            accelerator=accelerator, precision=precision, **placement,
            max_steps=plan.total_steps, max_epochs=1, accumulate_grad_batches=plan.accumulation,
            gradient_clip_val=cfg.train.grad_clip, limit_val_batches=0, num_sanity_val_steps=0,
            logger=False, enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=progress_bar,
            callbacks=callbacks, use_distributed_sampler=False, default_root_dir=str(folder),
        )
    if ray_train:
        from ray.train.lightning import prepare_trainer

        trainer = prepare_trainer(trainer)
    return trainer


class quiet_lightning:
    """Silence Lightning's start-up chatter and the warnings that do not apply here: the training
    loader resumes mid-epoch by construction (see ``cemlab.train.data``) and reads a memory map in
    the main process on purpose; and outside a SLURM job step (no ``SLURM_NTASKS``), Lightning's
    "``srun`` is available but not used", which it gives wherever slurm-wlm is installed, both when
    it chooses the cluster environment (the ``Trainer`` is built inside this context) and when
    ``fit`` probes for SLURM's requeue checkpoint. In a job step Lightning detects SLURM as ever."""

    def __enter__(self):
        self._levels = {}
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
            lg = logging.getLogger(name)
            self._levels[name] = lg.level
            lg.setLevel(logging.WARNING)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch ended.*")
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*isinstance.treespec, LeafSpec.*")
        if "SLURM_NTASKS" not in os.environ:
            warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")
        return self

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        return False
