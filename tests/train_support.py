"""What the training tests share: ``configs/default.yaml``, a module-wide runs folder, token cache
and MLflow store (the ``env`` fixture, imported by the modules that use it), and a minimal
LightningModule."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

DEFAULT_YAML = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A module-wide runs folder, token cache and MLflow store (created once: creating a sqlite
    store costs seconds)."""
    from cemlab.tracking.store import ensure_experiment, get_client

    root = tmp_path_factory.mktemp("train")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_RUNS_DIR", str(root / "runs"))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.delenv("CEMLAB_INJECT_NAN_STEP", raising=False)
        uri = f"sqlite:///{root}/mlflow.db"
        client = get_client(uri)
        ensure_experiment("cemlab", client)
        yield {"root": root, "uri": uri, "client": client, "cache": root / "cache"}


class Linear(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
