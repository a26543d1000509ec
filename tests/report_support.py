"""Helpers for the report tests: a small sweep folder and a real MLflow store with crafted runs.

The sweep files use the paper's sweep names (so the claims find them) at a ``smoke`` scale of two
made-up sizes; the runs are written with ``MlflowClient`` exactly as the sweep runner names them
(``cemlab.tracking.schema``), with metric values the tests choose.
"""

from __future__ import annotations

import math
from pathlib import Path

from cemlab.config import flatten
from cemlab.tracking import schema

SCALES_YAML = """\
smoke:
  description: report tests
  sizes:
    s1: {model: {preset: nano}, train: {tokens: 20000}}
    s2: {model: {preset: nano, d_model: 96}, train: {tokens: 40000}}
  lm:
    base: {train: {batch_size: 8, micro_batch_size: 8}}
  gp:
    base: {train: {batch_size: 8, micro_batch_size: 8}}
"""

SWEEPS = {
    "attention_replacement": """\
figure: "Fig 2a"
axes: {size: [s1, s2], seed: [0, 1, 2]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: cem-attn, set: {model.attention: cem}}
""",
    "mlp_replacement": """\
figure: "Fig 2b"
axes: {size: [s1, s2], seed: [0]}
variants:
  - {group: llama, label: llama}
  - {group: cem-mlp, label: cem-mlp, set: {model.mlp: cem}}
  - {group: cem-mlp, label: cem-mlp param-matched, set: {model.mlp: cem, model.mlp_param_matched: true}}
""",
    "recursion_ablation": """\
figure: "Fig 2c+2d"
axes: {size: [s1], seed: [0]}
variants:
  - {group: llama, label: llama}
  - group: cem-attn
    label: "cem-attn T{T} {precond}"
    set: {model.attention: cem, model.attn_steps: "{T}", model.attn_precond: "{precond}"}
    axes: {T: [1, 2], precond: [diag, dplr]}
  - group: cem-mlp
    label: "cem-mlp T{T} {precond}"
    set: {model.mlp: cem, model.mlp_steps: "{T}", model.mlp_precond: "{precond}"}
    axes: {T: [1, 2], precond: [diag, dplr]}
""",
    "lr_sweep": """\
figure: "Fig 3a"
axes: {size: [s1], lr: [5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3], seed: [0, 1]}
variants:
  - {group: llama, label: llama}
  - group: cem
    label: cem T2 dplr
    set: {model.attention: cem, model.mlp: cem, model.attn_steps: 2, model.mlp_steps: 2,
          model.attn_precond: dplr, model.mlp_precond: dplr}
""",
    "kq_diagonal": """\
figure: "Fig 3b"
axes: {size: [s1], seed: [0]}
variants:
  - group: cem-attn
    label: "cem-attn kq {kq}"
    set: {model.attention: cem, model.attn_precond: diag, model.kq_diagonal: "{kq}"}
    axes: {kq: [none, shared, per_head]}
""",
    "reuse_vs_recursion_mlp": """\
figure: "Fig 3c"
axes: {size: [s1], seed: [0]}
variants:
  - {group: reuse-mlp, label: "reuse T{T}", set: {model.mlp_reuse: "{T}"}, axes: {T: [1, 2]}}
  - {group: cem-mlp, label: "cem-mlp T{T}", set: {model.mlp: cem, model.mlp_steps: "{T}"}, axes: {T: [1, 2]}}
  - group: cem-mlp
    label: "cem-mlp param-matched T{T}"
    set: {model.mlp: cem, model.mlp_steps: "{T}", model.mlp_param_matched: true}
    axes: {T: [1, 2]}
""",
    "gp_recursion": """\
figure: "Table 3"
task: gp
axes: {seed: [0, 1]}
variants:
  - group: gp
    label: "{kernel} T{T}"
    set: {gp.kernel: "{kernel}", gp.steps: "{T}"}
    axes: {kernel: [rbf, gibbs], T: [1, 2, 4, 8]}
""",
}


def write_sweeps(directory: Path, names=None) -> Path:
    """The scales file and the named sweep files (default: all) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scales.yaml").write_text(SCALES_YAML)
    for name, text in SWEEPS.items():
        if names is None or name in names:
            (directory / f"{name}.yaml").write_text(text)
    return directory


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"


class RunWriter:
    """Writes sweep parent runs and trial runs into a real MLflow store."""

    def __init__(self, uri: str, artifact_root: Path):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self.artifact_root = artifact_root
        self._experiments: dict[str, str] = {}

    def experiment(self, name: str) -> str:
        if name not in self._experiments:
            exp = self.client.get_experiment_by_name(name)
            self._experiments[name] = exp.experiment_id if exp else self.client.create_experiment(
                name, artifact_location=(self.artifact_root / name.replace("/", "_")).as_uri())
        return self._experiments[name]

    def parent(self, sweep: str, scale: str = "smoke") -> str:
        run = self.client.create_run(self.experiment(f"cemlab/{sweep}"), run_name=f"{sweep}-{scale}",
                                     tags={schema.ROLE: "sweep", schema.SWEEP: sweep, schema.SCALE: scale})
        self.client.set_terminated(run.info.run_id)
        return run.info.run_id

    def trial(self, trial, status: str = schema.STATUS_FINISHED, metrics: dict | None = None,
              histories: dict | None = None, parent_id: str | None = None) -> str:
        """One trial's run: tags and params as the sweep runner writes them, ``metrics`` as final
        values (step 0) and ``histories`` as {key: [(step, value), ...]}."""
        from mlflow.entities import Metric, Param

        tags = dict(trial.config.tracking.tags)
        tags[schema.STATUS] = status
        if parent_id:
            tags[schema.PARENT_RUN_ID] = parent_id
        run = self.client.create_run(self.experiment(f"cemlab/{trial.sweep}"), run_name=trial.trial_id, tags=tags)
        rid = run.info.run_id
        items = [Metric(k, float(v), 0, 0) for k, v in (metrics or {}).items()]
        for key, points in (histories or {}).items():
            items += [Metric(key, float(v), i, int(s)) for i, (s, v) in enumerate(points)]
        params = [Param(k, str(v)[:500]) for k, v in flatten(trial.config.model_dump(mode="json",
                                                                                    exclude={"tracking"})).items()]
        for i in range(0, max(len(items), len(params)), 100):
            self.client.log_batch(rid, metrics=items[i:i + 100], params=params[i:i + 100])
        self.client.set_terminated(rid, "FAILED" if status == schema.STATUS_FAILED else "FINISHED")
        return rid


def lm_metrics(ppl: float, params: float = 1e6, tokens: float = 2e4) -> dict[str, float]:
    """A finished language-model run's final metrics."""
    return {schema.TEST_PPL: ppl, schema.PARAMS_TOTAL: params, schema.PARAMS_ATTENTION: params / 4,
            schema.PARAMS_MLP: params / 2, schema.PARAMS_EMBEDDING: params / 4,
            schema.FLOPS_PER_TOKEN: 6 * params, schema.TOKEN_BUDGET: tokens}


def nan() -> float:
    return math.nan


def migrated_store(template: Path, path: Path) -> str:
    """A fresh MLflow sqlite store at ``path``, copied from ``template`` (created and migrated on
    first use: a migration takes seconds, a copy milliseconds). Returns its URI."""
    import shutil

    if not template.exists():
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=sqlite_uri(template)).search_experiments()
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    return sqlite_uri(path)
