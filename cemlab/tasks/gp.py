"""GP regression (paper Table 3): the recursive CEM MLP regressor (``gp:`` section) on data drawn
from a Gaussian process; the metric is RMSE, the budget counts examples, the data is generated.

MLflow's dataset source is imported inside ``dataset_source`` only (MLflow takes seconds to import)."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any


from cemlab.config import RunConfig
from cemlab.tasks.base import Task, TaskData, format_lr, parameter_count
import cemlab.metric_names as schema

if TYPE_CHECKING:  # torch and the models are imported where a run needs them (cemlab plan, --help do not)
    import torch


class GPRegression(Task):
    name = "gp"
    title = "GP regression"
    section = "gp"
    unit = "examples"
    metric = "rmse"
    metric_label = "RMSE"
    metric_format = ".4f"
    sized = False
    prepared_data = False
    val_metrics = (schema.VAL_RMSE,)
    test_metric_at_steps = schema.TEST_RMSE_AT_STEPS
    seen_metric = schema.EXAMPLES_SEEN
    rate_metric = schema.EXAMPLES_PER_S

    # -- the config ------------------------------------------------------------------------------
    def seq_len(self, cfg: "RunConfig") -> int:
        return 1  # one example

    def parameters(self, cfg: "RunConfig") -> int:
        from cemlab.models.gp import build_gp_model, count_parameters

        return parameter_count(cfg.gp, build_gp_model, count_parameters)

    def train_flops_per_unit(self, cfg: "RunConfig", seq_len: int) -> float:
        from cemlab.models.gp import flops_per_example

        return flops_per_example(cfg.gp)["train"]

    def chance_value(self, cfg: "RunConfig") -> float:
        """The test RMSE of predicting the prior mean (0) everywhere: the targets' prior standard
        deviation, sqrt(signal_std^2 + noise_std^2); a diverged run counts at it."""
        return math.sqrt(cfg.gp.signal_std ** 2 + cfg.gp.noise_std ** 2)

    # -- names and descriptions ------------------------------------------------------------------
    def model_kind(self, cfg: "RunConfig") -> str:
        return "gp-cem"

    def default_group(self, cfg: "RunConfig") -> str:
        return "gp"

    def size_label(self, cfg: "RunConfig") -> str:
        gp = cfg.gp
        return f"d{gp.latent_dim}" + (f"x{gp.n_layers}" if gp.n_layers > 1 else "")

    def run_name(self, cfg: "RunConfig") -> str:
        """E.g. ``gp rbf T2 dplr d64 lr1e-3``: kernel, steps, preconditioner, size, learning rate,
        the data seed and the training seed when they are not 0."""
        gp, t = cfg.gp, cfg.train
        parts = ["gp", gp.kernel, f"T{gp.steps}"]
        if gp.precond != "none":
            parts.append(gp.precond)
        parts += [self.size_label(cfg), f"lr{format_lr(t.lr)}"]
        if gp.seed:
            parts.append(f"data{gp.seed}")
        if t.seed:
            parts.append(f"s{t.seed}")
        return " ".join(parts)

    def describe(self, cfg: "RunConfig", params: int | None = None) -> str:
        gp = cfg.gp
        return (f"GP regression with a {gp.kernel}-kernel CEM regressor ({self.size_label(cfg)}, T={gp.steps}, "
                f"preconditioner {gp.precond})")

    def corpus_name(self, cfg: "RunConfig") -> str:
        return f"gp-{cfg.gp.kernel}"

    def corpus_label(self, cfg: "RunConfig") -> str:
        return f"gp:{cfg.gp.kernel}"

    def dataset_source(self, cfg: "RunConfig"):
        """The generator and its settings (the data is drawn, not read)."""
        from mlflow.data.code_dataset_source import CodeDatasetSource

        return CodeDatasetSource({"generator": "cemlab.gp.make_gp_data", "kernel": cfg.gp.kernel,
                                  "seed": str(cfg.gp.seed)})

    def table_fields(self, cfg: "RunConfig", group: str) -> dict[str, Any]:
        gp = cfg.gp
        return {"family": "gp", "T": int(gp.steps), "precond": str(gp.precond), "eta": str(gp.eta),
                "kernel": str(gp.kernel), "x0": "", "corpus": self.corpus_label(cfg), "score_only": False}

    # -- training ----------------------------------------------------------------------------------
    def load_data(self, cfg: "RunConfig", plan) -> TaskData:
        """Draw the GP data (cached by its settings)."""
        from cemlab.gp.data import TensorPairs, make_gp_data

        d = make_gp_data(cfg.gp)
        return TaskData(TensorPairs(d.train.x, d.train.y), TensorPairs(d.val.x, d.val.y),
                        TensorPairs(d.test.x, d.test.y), stats={**d.meta, "train_examples": len(d.train)})

    def build(self, cfg: "RunConfig"):
        return GPTraining(cfg, self)


class GPTraining:
    """The training-time half of the task (``GPRegression.build``): the regressor, mean squared error,
    RMSE, FLOPs per example, the energies of its CEM MLP layers."""

    metric = "rmse"
    energy_batch_size = 256   # validation examples the energy traces are taken on

    def __init__(self, cfg: "RunConfig", task: GPRegression):
        self.cfg, self.task = cfg, task
        self.gp = cfg.gp
        from cemlab.models.gp import build_gp_model

        self.model = build_gp_model(self.gp)

    @staticmethod
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return F.mse_loss(out.float(), y.float())

    @staticmethod
    def eval_sums(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        return ((out.double() - y.double()) ** 2).sum(), y.numel()

    @staticmethod
    def metrics_from_sums(total: float, count: int) -> dict[str, float]:
        mse = total / count
        return {"loss": mse, "rmse": math.sqrt(mse)}

    def static_metrics(self, seq_len: int) -> dict[str, float]:
        from cemlab.models.gp import count_parameters, flops_per_example

        counts = count_parameters(self.model)
        return {schema.PARAMS_TOTAL: counts["total"], schema.PARAMS_MLP: counts["cem"],
                schema.FLOPS_PER_EXAMPLE: flops_per_example(self.gp)["forward"]}

    def train_flops_per_unit(self, seq_len: int) -> float:
        return self.task.train_flops_per_unit(self.cfg, seq_len)

    def recursion_T(self) -> int:
        return self.gp.steps

    @contextmanager
    def recursion_steps(self, steps: int):
        with self.model.recursion_steps(steps):
            yield

    def step_sizes(self) -> dict[tuple[str, int], list[float]]:
        return {}

    def description(self) -> str:
        return ""

    def energy_trace(self, x: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        trace = self.model.energy_trace(x)  # [n_layers, T+1]
        return {("mlp", i): trace[i].cpu() for i in range(trace.shape[0])}
