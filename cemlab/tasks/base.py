"""What every task says about itself: the interface of :class:`Task`.

A task is a kind of study cemlab trains (language modelling, GP regression). Everything that
differs between tasks is an attribute or a method here, so that the rest of cemlab asks the task
(``task_of(cfg).unit``) instead of comparing task names. The methods work on the config alone
(cheap: ``cemlab plan`` and the report call them for every trial).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from cemlab.tasks.scale import TaskScale

if TYPE_CHECKING:  # pragma: no cover
    from cemlab.config import RunConfig


def format_lr(lr: float) -> str:
    """``0.002 -> "2e-3"``, ``0.0005 -> "5e-4"``, ``0.0025 -> "2.5e-3"`` (short and exact)."""
    mantissa, exponent = f"{lr:.6e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_eta(e: Any) -> str:
    """A step size as a label: a number in ``%g`` form, or the mode (``1/T``, ``learned``)."""
    try:
        return f"{float(e):g}"
    except ValueError:
        return str(e)


def parameter_count(config, build: Callable, count: Callable, exclude: set[str] | None = None) -> int:
    """Total parameters of ``build(config)`` (``count(model)["total"]``), built for its shapes only
    (:func:`_shapes_only`) and cached by the config's JSON: a sweep plans hundreds of trials on a few
    models, and ``cemlab plan`` builds every size of the paper scale."""
    return _shape_count(type(config), config.model_dump_json(exclude=exclude), build, count)


@functools.lru_cache(maxsize=4096)
def _shape_count(config_type, config_json: str, build: Callable, count: Callable) -> int:
    with _shapes_only():
        return count(build(config_type.model_validate_json(config_json)))["total"]


def _shapes_only():
    """A torch function mode for building a model only to count its parameters: the in-place ops
    (the initialisers: ``normal_``, ``zero_``, ...) do nothing and random tensors are empty ones,
    so the weights' storage is allocated but never written (untouched pages take no memory). Not
    the meta device: there every initialiser ran torch's Python reference implementation, about a
    millisecond apiece, and the first one imported ``torch._dynamo`` (1.1 s); this keeps ``cemlab
    plan`` fast. The counts are tested against models built for real (``tests/test_tasks.py``)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class ShapesOnly(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name, kwargs = getattr(func, "__name__", ""), kwargs or {}
            if name.endswith("_") and not name.endswith("__"):
                target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
                if isinstance(target, torch.Tensor):
                    return target
            if name in ("randn", "rand"):
                return torch.empty(*args, **{k: v for k, v in kwargs.items() if k != "generator"})
            return func(*args, **kwargs)

    return ShapesOnly()


@dataclass
class TaskData:
    """The three splits of a task as datasets of ``(input, target)`` pairs, and facts about them."""

    train: Any
    val: Any
    test: Any
    stats: dict[str, Any] = field(default_factory=dict)
    vocab_size: int | None = None          # LM only
    train_stream: Any = None               # LM only: the raw token streams (unigram baselines)
    test_stream: Any = None


class Task:
    """One task: its facts (class attributes) and what it derives from a run config (methods)."""

    name: ClassVar[str]            # the config's ``task:`` value
    title: ClassVar[str]           # for people: "language modelling"
    section: ClassVar[str]         # the RunConfig section that holds the model: ``model`` / ``gp``
    unit: ClassVar[str]            # what the budget counts: ``tokens`` / ``examples``
    #: The headline metric, logged as ``val/<metric>`` and ``test/<metric>``: ``ppl`` / ``rmse``.
    #: Progress rows, ``summary.json`` (``test_<metric>``), the store check, the report and
    #: ``cemlab train`` read it, with the three facts below, from the task.
    metric: ClassVar[str]
    metric_label: ClassVar[str]               # for people: "perplexity", "RMSE"
    metric_format: ClassVar[str] = ".4f"      # how a value of it is printed (format spec)
    metric_log_axis: ClassVar[bool] = False   # plotted on a log axis (it falls by orders of magnitude)
    lower_is_better: ClassVar[bool] = True
    #: The model of the task's section of a sweep scale (``scales.yaml``: ``<scale>.<name>``).
    scale_model: ClassVar[type[TaskScale]] = TaskScale
    sized: ClassVar[bool]          # sweeps list model sizes (``axes.size``), defined per scale
    prepared_data: ClassVar[bool]  # data is a corpus prepared ahead (False: generated when trained)
    #: Validation metrics worth quoting for a run that did not finish, best first.
    val_metrics: ClassVar[tuple[str, ...]]
    test_metric_at_steps: ClassVar[str]   # test metric against test-time recursion steps
    seen_metric: ClassVar[str]            # train/tokens or train/examples
    rate_metric: ClassVar[str]            # train/tokens_per_s or train/examples_per_s

    @property
    def val_metric(self) -> str:
        return f"val/{self.metric}"

    @property
    def test_metric(self) -> str:
        return f"test/{self.metric}"

    @property
    def summary_key(self) -> str:
        """The key of the test metric in a sweep's ``summary.json`` (``test_ppl``, ``test_rmse``)."""
        return f"test_{self.metric}"

    def chance_value(self, cfg: "RunConfig") -> float:
        """The test metric of a model that learned nothing: a result no better than this is a worst
        outcome (``cemlab.report.stats.divergence.worst_outcomes``), and a learning-rate curve puts a diverged
        run here (``cemlab.report.stats.divergence.at_chance``). NaN where the task states none."""
        return math.nan

    def format_metric(self, value: float) -> str:
        """A value of the headline metric as the task prints it."""
        return format(value, self.metric_format)

    def __repr__(self) -> str:
        return f"<task {self.name}: {self.title}>"

    # -- the config ------------------------------------------------------------------------------
    def model_config(self, cfg: "RunConfig") -> Any:
        return getattr(cfg, self.section)

    def seq_len(self, cfg: "RunConfig") -> int:
        """Tokens per training sequence (a task without sequences: 1, one example)."""
        raise NotImplementedError

    def budget_parameters(self, cfg: "RunConfig") -> int:
        """Parameters the Chinchilla budget counts: the model's own (language modelling counts its
        matched Llama's instead)."""
        return self.parameters(cfg)

    def parameters(self, cfg: "RunConfig") -> int:
        """Parameters of the run's model (counted on a shapes-only build, cached)."""
        raise NotImplementedError

    def train_flops_per_unit(self, cfg: "RunConfig", seq_len: int) -> float:
        """Training FLOPs per unit of the budget (a token of ``seq_len``-token sequences, or an example)."""
        raise NotImplementedError

    # -- names and descriptions ------------------------------------------------------------------
    def model_kind(self, cfg: "RunConfig") -> str:
        raise NotImplementedError

    def default_group(self, cfg: "RunConfig") -> str:
        """A run's group (variant family) where its sweep file names none: its model's kind."""
        return self.model_kind(cfg)

    def size_label(self, cfg: "RunConfig") -> str:
        raise NotImplementedError

    def run_name(self, cfg: "RunConfig") -> str:
        raise NotImplementedError

    def describe(self, cfg: "RunConfig", params: int | None = None) -> str:
        """What the run trains, in a sentence (without the budget)."""
        raise NotImplementedError

    def corpus_name(self, cfg: "RunConfig") -> str:
        raise NotImplementedError

    def corpus_label(self, cfg: "RunConfig") -> str:
        """``source:name`` of the data, as the report's ``corpus`` column shows it."""
        raise NotImplementedError

    def budget_of(self, cfg: "RunConfig") -> str:
        """`` of <corpus>`` after the budget in a description ('' where the data is generated)."""
        return ""

    def dataset_source(self, cfg: "RunConfig"):
        """The MLflow dataset source of the run's data."""
        raise NotImplementedError

    def table_fields(self, cfg: "RunConfig", group: str) -> dict[str, Any]:
        """The report table's columns derived from the config (where the sweep's axes do not say):
        family, T, precond, eta, kernel, x0, corpus, score_only."""
        raise NotImplementedError

    # -- training ----------------------------------------------------------------------------------
    def load_data(self, cfg: "RunConfig", plan) -> TaskData:
        """The run's three splits (``plan``: its :class:`cemlab.train.plan.TrainPlan`)."""
        raise NotImplementedError

    def build(self, cfg: "RunConfig"):
        """The training-time task object (model, loss, metrics, recursion), defined in the task's own module."""
        raise NotImplementedError
