"""The run's Lightning ``Trainer`` outside and inside a SLURM job step (``cemlab.train.trainer``)."""

from __future__ import annotations

import os
import warnings
from types import SimpleNamespace

import pytest
import torch
from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment
from torch.utils.data import DataLoader, TensorDataset

from cemlab.train.trainer import build_trainer, quiet_lightning
from train_support import Linear


def _trainer(tmp_path, fit: bool = False):
    """cemlab's Trainer, built and (``fit``) trained for 2 steps as ``cemlab.train.run.fit`` does;
    the warnings on the way."""
    cfg = SimpleNamespace(train=SimpleNamespace(devices=1, grad_clip=1.0))
    plan = SimpleNamespace(total_steps=2, accumulation=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = build_trainer(cfg, plan, "cpu", "32-true", [], tmp_path, progress_bar=False)
        if fit:
            data = TensorDataset(torch.randn(4, 3), torch.randn(4, 1))
            with quiet_lightning():
                trainer.fit(Linear(), train_dataloaders=DataLoader(data, batch_size=2))
    return trainer, [str(w.message) for w in caught]


@pytest.fixture
def srun_on_path(tmp_path, monkeypatch):
    """An ``srun`` on PATH (as where slurm-wlm is installed), and no SLURM job variables."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for name in ("SLURM_NTASKS", "SLURM_JOB_NAME", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    return bin_dir


def test_outside_slurm_lightning_neither_detects_slurm_nor_warns_about_srun(srun_on_path, tmp_path):
    """Neither when the Trainer is built nor in ``fit`` (which probes for SLURM's requeue checkpoint)."""
    trainer, messages = _trainer(tmp_path, fit=True)
    assert trainer.global_step == 2
    assert not [m for m in messages if "srun" in m], messages
    assert isinstance(trainer._accelerator_connector.cluster_environment, LightningEnvironment)


def test_in_a_slurm_job_step_lightning_still_detects_slurm(srun_on_path, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "cemlab-trial")
    trainer, _ = _trainer(tmp_path)
    assert isinstance(trainer._accelerator_connector.cluster_environment, SLURMEnvironment)
