"""Language modelling: a causal LM (``model:`` section) trained on a tokenised corpus; the metric
is perplexity, the budget counts tokens, sweeps list model sizes (paper Figs 2-4).

MLflow's dataset sources are imported inside ``dataset_source`` only: MLflow takes seconds to
import, and ``cemlab plan`` and the report use the rest of the task without it."""

from __future__ import annotations

import math
import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cemlab.config import ConfigError, RunConfig
from cemlab.data.corpus import stdlib_root
from cemlab.models.config import PRESETS
from cemlab.tasks.base import Task, TaskData, format_eta, format_lr, parameter_count
import cemlab.metric_names as schema

if TYPE_CHECKING:  # torch and the models are imported where a run needs them (cemlab plan, --help do not)
    import torch

#: Model dimensions that make a size, with their short labels (``d128 L3``).
SIZE_DIMS = (("d_model", "d"), ("n_layers", "L"), ("n_heads", "h"), ("d_mlp", "mlp"))


def _sublayer(kind: str, steps: int, eta: float | str, precond: str, reuse: int) -> str:
    if kind == "cem":  # eta: a number, "1/T" or "learned" (the step-size modes)
        text = f"CEM (T={steps}, η={eta if isinstance(eta, str) else format(eta, 'g')}, preconditioner {precond})"
    else:
        text = "Llama"
    return text + (f", reused {reuse}x" if reuse > 1 else "")


class LanguageModelling(Task):
    name = "lm"
    title = "language modelling"
    section = "model"
    unit = "tokens"
    metric = "ppl"
    metric_label = "perplexity"
    metric_format = ".2f"
    metric_log_axis = True
    sized = True
    prepared_data = True
    val_metrics = (schema.VAL_PPL, schema.VAL_LOSS)
    test_metric_at_steps = schema.TEST_PPL_AT_STEPS
    seen_metric = schema.TOKENS_SEEN
    rate_metric = schema.TOKENS_PER_S

    # -- the config ------------------------------------------------------------------------------
    def seq_len(self, cfg: "RunConfig") -> int:
        """Packed sequence length: ``data.seq_len`` or the model's context."""
        seq_len = cfg.data.seq_len or cfg.model.context_length
        if seq_len > cfg.model.context_length:
            raise ConfigError(
                f"data.seq_len={seq_len} exceeds model.context_length={cfg.model.context_length}; "
                f"lower data.seq_len or raise model.context_length"
            )
        return seq_len

    def budget_parameters(self, cfg: "RunConfig") -> int:
        """The matched Llama baseline's parameters, counted on a shapes-only build (nothing initialised), so that
        a CEM variant trains on exactly the tokens of its baseline."""
        from cemlab.models import build_model, count_parameters

        return parameter_count(cfg.model.matched_baseline(), build_model, count_parameters, exclude={"name"})

    def parameters(self, cfg: "RunConfig") -> int:
        from cemlab.models import build_model, count_parameters

        return parameter_count(cfg.model, build_model, count_parameters, exclude={"name"})

    def train_flops_per_unit(self, cfg: "RunConfig", seq_len: int) -> float:
        from cemlab.models import flops_per_token

        return flops_per_token(cfg.model, seq_len)["train"]

    # -- names and descriptions ------------------------------------------------------------------
    def model_kind(self, cfg: "RunConfig") -> str:
        return cfg.model.kind

    def size_label(self, cfg: "RunConfig") -> str:
        """The preset name (``86m``, ``tiny``) while the model has that preset's dimensions;
        otherwise the dimensions that differ from it (``d128 L3``), or all of them without a preset
        (``d128 L3 h4 mlp344``). The vocabulary and context are data settings."""
        m = cfg.model
        preset = PRESETS.get(m.name) if m.name else None
        if m.name and preset is None:
            return m.name  # a size name of a sweep scale (its dimensions are that scale's)
        differ = [(f, short) for f, short in SIZE_DIMS if preset is None or getattr(m, f) != preset[f]]
        if not differ:
            return m.name
        return " ".join(f"{short}{getattr(m, f)}" for f, short in differ)

    def run_name(self, cfg: "RunConfig") -> str:
        """E.g. ``cem-attn T2 dplr 86m lr2e-3``: the model kind; for CEM sublayers the recursion
        steps (``T2``, or ``Ta2 Tm1`` when attention and MLP differ), the preconditioner, the KQ
        diagonal, plain reuse (``reuse2``) and parameter matching (``pm``); the size; the learning
        rate; the seed when it is not 0."""
        m, t = cfg.model, cfg.train
        parts = [m.kind]
        steps = {}
        if m.attention.kind == "cem":
            steps["a"] = m.attention.steps
        if m.mlp.kind == "cem":
            steps["m"] = m.mlp.steps
        if len(set(steps.values())) == 1:
            parts.append(f"T{next(iter(steps.values()))}")
        elif steps:
            parts.append(" ".join(f"T{k}{v}" for k, v in steps.items()))
        precs = {p for p, used in ((m.attention.precond, m.attention.kind == "cem"), (m.mlp.precond, m.mlp.kind == "cem")) if used}
        precs.discard("none")
        parts += sorted(precs)
        if m.attention.kq_diagonal != "none":
            parts.append(f"kq-{m.attention.kq_diagonal}")
        if m.attention.exact_energy_gradient:
            parts.append("exact")
        reuse = max(m.attention.reuse, m.mlp.reuse)
        if reuse > 1:
            parts.append(f"reuse{reuse}")
        if m.mlp.param_matched:
            parts.append("pm")
        parts += [self.size_label(cfg), f"lr{format_lr(t.lr)}"]
        if t.seed:
            parts.append(f"s{t.seed}")
        return " ".join(parts)

    def describe(self, cfg: "RunConfig", params: int | None = None) -> str:
        m = cfg.model
        what = (f"A {self.model_kind(cfg)} language model, size {self.size_label(cfg)} (d_model {m.d_model}, "
                f"{m.n_layers} layers, {m.n_heads} heads{f', {params / 1e6:.3g}M parameters' if params else ''}); "
                "attention: " + _sublayer(m.attention.kind, m.attention.steps, m.attention.eta, m.attention.precond, m.attention.reuse)
                + "; MLP: " + _sublayer(m.mlp.kind, m.mlp.steps, m.mlp.eta, m.mlp.precond, m.mlp.reuse))
        if m.attention.kq_diagonal != "none":
            what += f"; KQ diagonal {m.attention.kq_diagonal}"
        return what

    def chance_value(self, cfg: "RunConfig") -> float:
        """The perplexity of the uniform predictor over the vocabulary (cross-entropy log V): no
        model that learned anything is worse, so a diverged run counts at it."""
        return float(cfg.model.vocab_size)

    def budget_of(self, cfg: "RunConfig") -> str:
        d = cfg.data
        return f" of {d.source if d.source != 'hf' else d.hf_dataset}"

    def corpus_name(self, cfg: "RunConfig") -> str:
        d = cfg.data
        if d.source == "hf":
            return Path(d.hf_dataset).name or d.hf_dataset
        if d.source == "text":
            return Path(d.path or "text").name
        return "stdlib"

    def corpus_label(self, cfg: "RunConfig") -> str:
        d = cfg.data
        name = {"hf": d.hf_dataset, "text": d.path}.get(d.source) or getattr(d, "text_package", None)
        return f"{d.source}:{name}" if name else str(d.source)

    def dataset_source(self, cfg: "RunConfig"):
        """A local corpus folder, the standard library's sources, or a Hugging Face dataset."""
        d = cfg.data
        if d.source == "hf" and not Path(d.hf_dataset).exists():
            from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource

            return HuggingFaceDatasetSource(path=d.hf_dataset, config_name=d.hf_config, split=d.hf_split)
        if d.source == "stdlib":
            path = str(stdlib_root())
        else:
            path = d.path if d.source == "text" else d.hf_dataset
        from mlflow.data.dataset_source_registry import resolve_dataset_source

        with warnings.catch_warnings():  # "can be interpreted in multiple ways": both are the local one
            warnings.simplefilter("ignore")
            return resolve_dataset_source(os.path.abspath(path))

    def table_fields(self, cfg: "RunConfig", group: str) -> dict[str, Any]:
        m = cfg.model
        return {"family": _family(m, group), "T": _derived_T(m, group), "precond": _derived_precond(m),
                "eta": "/".join(dict.fromkeys(format_eta(e) for e, kind in ((m.attention.eta, m.attention.kind),
                                                                            (m.mlp.eta, m.mlp.kind)) if kind == "cem")),
                "kernel": "", "x0": str(getattr(m, "cem_x0", "h")), "corpus": self.corpus_label(cfg),
                # Algorithm 1's KQ diagonal in the scores only: the attention step is not the energy's gradient
                "score_only": bool(m.attention.kind == "cem" and m.attention.kq_diagonal != "none" and not m.attention.exact_energy_gradient)}

    # -- training ----------------------------------------------------------------------------------
    def load_data(self, cfg: "RunConfig", plan) -> TaskData:
        """Tokenised and cached corpus splits, packed into sequences of ``plan.seq_len``."""
        from cemlab.data import PackedDataset, prepare_data

        min_tokens = plan.tokens if cfg.data.source == "hf" else None
        bundle = prepare_data(cfg.data, cfg.model.vocab_size, plan.seq_len, min_train_tokens=min_tokens)
        return TaskData(
            PackedDataset(bundle.train, plan.seq_len), PackedDataset(bundle.val, plan.seq_len),
            PackedDataset(bundle.test, plan.seq_len), stats=dict(bundle.stats), vocab_size=cfg.model.vocab_size,
            train_stream=bundle.train, test_stream=bundle.test,
        )

    def build(self, cfg: "RunConfig"):
        return LanguageModelTraining(cfg, self)


def _family(m, group: str) -> str:
    """The model family figures and claims select on (sweep files may name their groups freely,
    e.g. ``cem-mlp-pm``): ``reuse-attn``/``reuse-mlp`` (plain reuse; at T=1 the config is Llama's,
    so the group tells), else ``llama``, ``cem-attn``, ``cem-mlp``, ``cem``."""
    if m.kind == "llama":
        if m.attention.reuse > 1 or (group.startswith("reuse") and "attn" in group):
            return "reuse-attn"
        if m.mlp.reuse > 1 or group.startswith("reuse"):
            return "reuse-mlp"
    return m.kind


def _derived_T(m, group: str) -> int:
    if group.startswith("reuse"):
        return max(m.attention.reuse, m.mlp.reuse)
    if m.attention.kind == "cem" and m.mlp.kind != "cem":
        return m.attention.steps
    if m.mlp.kind == "cem" and m.attention.kind != "cem":
        return m.mlp.steps
    return max(m.attention.steps, m.mlp.steps, m.attention.reuse, m.mlp.reuse)


def _derived_precond(m) -> str:
    if m.attention.kind == "cem" and m.mlp.kind == "cem":
        return m.attention.precond if m.attention.precond == m.mlp.precond else f"{m.attention.precond}/{m.mlp.precond}"
    if m.attention.kind == "cem":
        return m.attention.precond
    if m.mlp.kind == "cem":
        return m.mlp.precond
    return "none"


class LanguageModelTraining:
    """The training-time half of the task (``LanguageModelling.build``): the model, next-token cross
    entropy, perplexity ``exp(mean NLL per token)``, FLOPs per token, the energies of every CEM sublayer."""

    metric = "ppl"            # the headline entry of metrics_from_sums: val/ppl, test/ppl
    energy_batch_size = 4     # validation sequences the energy traces are taken on

    def __init__(self, cfg: "RunConfig", task: LanguageModelling):
        from cemlab.models import build_model

        self.cfg, self.task = cfg, task
        self.model = build_model(cfg.model)

    # -- loss and metrics ---------------------------------------------------------------------
    @staticmethod
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    @staticmethod
    def eval_sums(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        import torch.nn.functional as F

        nll = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1), reduction="sum")
        return nll.double(), y.numel()

    @staticmethod
    def metrics_from_sums(total: float, count: int) -> dict[str, float]:
        loss = total / count
        return {"loss": loss, "ppl": math.exp(loss) if loss < 700 else float("inf")}

    # -- facts --------------------------------------------------------------------------------
    def static_metrics(self, seq_len: int) -> dict[str, float]:
        from cemlab.models import count_parameters

        counts = count_parameters(self.model)
        return {
            schema.PARAMS_TOTAL: counts["total"], schema.PARAMS_ATTENTION: counts["attention"],
            schema.PARAMS_MLP: counts["mlp"], schema.PARAMS_EMBEDDING: counts["embedding"],
            schema.PARAMS_HEAD: counts["head"],
            schema.FLOPS_PER_TOKEN: self.train_flops_per_unit(seq_len),
        }

    def train_flops_per_unit(self, seq_len: int) -> float:
        return self.task.train_flops_per_unit(self.cfg, seq_len)

    # -- CEM recursion ------------------------------------------------------------------------
    def recursion_T(self) -> int | None:
        """The training recursion steps T of the CEM sublayers (None for a model without any)."""
        m = self.cfg.model
        steps = [s for s, kind in ((m.attention.steps, m.attention.kind), (m.mlp.steps, m.mlp.kind)) if kind == "cem"]
        return max(steps) if steps else None

    @contextmanager
    def recursion_steps(self, steps: int):
        m = self.cfg.model
        with self.model.recursion_steps(attn=steps if m.attention.kind == "cem" else None,
                                        mlp=steps if m.mlp.kind == "cem" else None):
            yield

    def energy_trace(self, x: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        return self.model.energy_trace(x)

    def step_sizes(self) -> dict[tuple[str, int], list[float]]:
        """eta_t of every CEM sublayer's steps (fixed, 1/T or learned), by (sublayer, layer)."""
        return {(name, i): sub.step_sizes() for name, i, sub in self.model.cem_sublayers()}

    def description(self) -> str:
        """The run's MLflow description: what each CEM sublayer's step is (see ``step_description``)."""
        return step_description(self.cfg.model)



def step_description(m) -> str:
    """One line per CEM sublayer: steps, step size, total step, where the state starts, and whether
    the step is the gradient of the stated energy (a KQ diagonal in the scores only is not)."""
    lines = []
    for sub, kind, T, eta in (("attention", m.attention.kind, m.attention.steps, m.attention.eta), ("MLP", m.mlp.kind, m.mlp.steps,
                                                                                        m.mlp.eta)):
        if kind != "cem":
            continue
        total = {"1/T": "1", "learned": "learned, initialised to 1"}.get(eta) if isinstance(eta, str) else \
            f"{T * float(eta):g}"
        lines.append(f"CEM {sub}: T={T} steps of eta={eta} (total step T*eta = {total}), x0={m.cem_x0}.")
    if m.attention.kind == "cem" and m.attention.kq_diagonal != "none" and not m.attention.exact_energy_gradient:
        lines.append("Score-only KQ diagonal (Algorithm 1): the attention step is NOT the gradient of the stated "
                     "energy, so the energy need not fall along the recursion (exact_energy_gradient=true makes it so).")
    return " ".join(lines)
