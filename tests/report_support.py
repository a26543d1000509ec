"""Helpers for the report tests: a small sweep folder and a real MLflow store with crafted runs.

The sweep files use the paper's sweep names and list the figures and claims of the project's files
of the same name, at a ``smoke`` scale of two made-up sizes; the runs are written with
``MlflowClient`` exactly as the sweep runner names them (``cemlab.tracking.schema``), with metric
values the tests choose.
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
figures: [fig2a]
claims: [attn-small-cost, mlp-loses-more]
axes: {size: [s1, s2], seed: [0, 1, 2]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: cem-attn, set: {model.attention: cem}}
""",
    "mlp_replacement": """\
figure: "Fig 2b"
figures: [fig2b]
claims: [mlp-loses-more, param-matching-recovers]
axes: {size: [s1, s2], seed: [0, 1, 2]}
variants:
  - {group: llama, label: llama}
  - {group: cem-mlp, label: cem-mlp, set: {model.mlp: cem}}
  - {group: cem-mlp-pm, label: cem-mlp param-matched, set: {model.mlp: cem, model.mlp_param_matched: true}}
""",
    "recursion_ablation": """\
figure: "Fig 2c+2d"
figures: [fig2c, fig2d]
claims: [t2-beats-t1, precond-t2-not-t1, cem-attn-t2-beats-llama, test-time-recursion]
axes: {size: [s1], seed: [0, 1, 2]}
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
figures: [fig3a]
claims: [full-cem-matches-llama, full-cem-higher-lr]
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
figures: [fig3b]
claims: [kq-diagonal-matters, shared-close-to-per-head]
axes: {size: [s1], seed: [0, 1, 2]}
variants:
  - group: cem-attn
    label: "cem-attn kq {kq}"
    set: {model.attention: cem, model.attn_precond: diag, model.kq_diagonal: "{kq}"}
    axes: {kq: [none, shared, per_head]}
""",
    "reuse_vs_recursion_mlp": """\
figure: "Fig 3c"
figures: [fig3c]
claims: [reuse-vs-recursion-mlp]
axes: {size: [s1], seed: [0, 1, 2]}
variants:
  - {group: reuse-mlp, label: "reuse T{T}", set: {model.mlp_reuse: "{T}"}, axes: {T: [1, 2]}}
  - {group: cem-mlp, label: "cem-mlp T{T}", set: {model.mlp: cem, model.mlp_steps: "{T}"}, axes: {T: [1, 2]}}
  - group: cem-mlp-pm
    label: "cem-mlp param-matched T{T}"
    set: {model.mlp: cem, model.mlp_steps: "{T}", model.mlp_param_matched: true}
    axes: {T: [1, 2]}
""",
    "gp_recursion": """\
figure: "Table 3"
figures: [table3]
claims: [gp-t2-beats-t1, gp-not-monotonic]
task: gp
axes: {seed: [0, 1]}
variants:
  - group: gp
    label: "{kernel} T{T}"
    set: {gp.kernel: "{kernel}", gp.steps: "{T}"}
    axes: {kernel: [rbf, gibbs], T: [1, 2, 4, 8]}
""",
}


#: The MLflow status a run of each cemlab status ends with (``cemlab.tracking.mlflow_run``).
MLFLOW_STATUS = {schema.STATUS_FAILED: "FAILED", schema.STATUS_INTERRUPTED: "KILLED"}


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
            # a server chooses its artifact location; a sqlite store gets one under artifact_root
            location = None if self.client.tracking_uri.startswith("http") else \
                (self.artifact_root / name.replace("/", "_")).as_uri()
            self._experiments[name] = exp.experiment_id if exp else self.client.create_experiment(
                name, artifact_location=location)
        return self._experiments[name]

    def parent(self, sweep: str, scale: str = "smoke") -> str:
        run = self.client.create_run(self.experiment(f"cemlab/{sweep}"), run_name=f"{sweep}-{scale}",
                                     tags={schema.ROLE: "sweep", schema.SWEEP: sweep, schema.SCALE: scale})
        self.client.set_terminated(run.info.run_id)
        return run.info.run_id

    def trial(self, trial, status: str = schema.STATUS_FINISHED, metrics: dict | None = None,
              histories: dict | None = None, parent_id: str | None = None, tags: dict | None = None) -> str:
        """One trial's run: tags and params as the sweep runner writes them (plus ``tags``), the
        MLflow status that goes with ``status``, ``metrics`` as final values (step 0) and
        ``histories`` as {key: [(step, value), ...]}."""
        from mlflow.entities import Metric, Param

        tags = {**trial.config.tracking.tags, **(tags or {})}
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
        self.client.set_terminated(rid, MLFLOW_STATUS.get(status, "FINISHED"))
        return rid


def lm_metrics(ppl: float, params: float = 1e6, tokens: float = 2e4) -> dict[str, float]:
    """A finished language-model run's final metrics."""
    return {schema.TEST_PPL: ppl, schema.PARAMS_TOTAL: params, schema.PARAMS_ATTENTION: params / 4,
            schema.PARAMS_MLP: params / 2, schema.PARAMS_EMBEDDING: params / 4,
            schema.FLOPS_PER_TOKEN: 6 * params, schema.TOKEN_BUDGET: tokens}


# ----------------------------------------------------------------------------------------------
# The test scenario: crafted outcomes for every trial of the test sweeps
# ----------------------------------------------------------------------------------------------

# Values by (sweep, trial label parts). Shared configs (the Llama baselines, plain reuse at T=1)
# are written once, by the first sweep that has them, and reused by hash.
ATTN = {("s1", "llama"): [30.0, 31.0, 32.5], ("s1", "cem-attn"): [30.5, 31.5, "diverged"],
        ("s2", "llama"): [25.0, 25.5, 26.0], ("s2", "cem-attn"): [25.8, "missing", 26.8]}
MLP = {("s1", "cem-mlp"): 33.0, ("s1", "cem-mlp param-matched"): 32.0,
       ("s2", "cem-mlp"): 27.5, ("s2", "cem-mlp param-matched"): 28.0}
RECURSION = {"cem-attn T1 diag": 31.0, "cem-attn T1 dplr": 31.1, "cem-attn T2 diag": 29.5, "cem-attn T2 dplr": 28.9,
             "cem-mlp T1 diag": 33.0, "cem-mlp T1 dplr": 32.9, "cem-mlp T2 diag": 32.0, "cem-mlp T2 dplr": 31.2}
# "none" has the config of recursion_ablation's "cem-attn T1 diag" (31.0): that run is reused
KQ = {"none": 99.0, "shared": 30.2, "per_head": 30.0}
REUSE = {"reuse T2": 29.9, "cem-mlp T2": 32.0, "cem-mlp param-matched T2": 31.0}
GP = {("rbf", 1): [0.30, 0.32], ("rbf", 2): [0.25, 0.27], ("rbf", 4): [0.22, 0.24], ("rbf", 8): [0.23, 0.25],
      ("gibbs", 1): [0.40, 0.42], ("gibbs", 2): [0.35, 0.37], ("gibbs", 4): [0.33, 0.35], ("gibbs", 8): [0.30, 0.32]}
LR_OPT = {"llama": (30.0, 1.5e-3), "cem": (29.6, 3.5e-3)}


def lr_curve(group: str, lr: float, seed: int) -> float:
    base, opt = LR_OPT[group]
    return base + 8 * (math.log10(lr) - math.log10(opt)) ** 2 + (0.1 if seed else -0.1)


def params_of(trial) -> float:
    # a made-up but distinct parameter count per size and family
    return {"s1": 1.0e6, "s2": 2.0e6, "": 5e4}[trial.size] * {"cem-attn": 0.9, "cem-mlp": 0.8, "cem": 0.7}.get(
        trial.group, 1.0) * (1.2 if trial.config.model.mlp.param_matched else 1.0)


def seeded(value: float, size: str, seed: int, label: str) -> float:
    """A crafted cell value at one seed: the seed's shared effect (as in the Llama baseline of the
    size: same seed, same data order) times a small per-variant jitter of at most 0.2%, so that
    paired comparisons over seeds have narrow but non-zero intervals."""
    llama = ATTN[(size, "llama")]
    jitter = 0.001 * ((seed * 7 + sum(map(ord, label))) % 5 - 2)
    return value * llama[seed] / llama[0] * (1 + jitter)


def value_of(trial):
    """The crafted outcome of a trial: a float (finished), 'diverged', 'failed' or 'missing'."""
    a, s = trial.axes, trial.size
    seed = a["seed"]
    if trial.sweep == "attention_replacement":
        return ATTN[(s, trial.variant)][seed]
    if trial.sweep == "mlp_replacement":
        return seeded(MLP[(s, trial.variant)], s, seed, trial.variant)
    if trial.sweep == "recursion_ablation":
        return ATTN[("s1", "llama")][seed] if trial.group == "llama" else \
            seeded(RECURSION[trial.variant], s, seed, trial.variant)
    if trial.sweep == "lr_sweep":
        if trial.group == "cem" and a["lr"] == 8e-3 and seed == 1:
            return "diverged"
        return lr_curve(trial.group, a["lr"], seed)
    if trial.sweep == "kq_diagonal":
        return seeded(KQ[a["kq"]], s, seed, trial.variant)
    if trial.sweep == "reuse_vs_recursion_mlp":
        return seeded(REUSE[trial.variant], s, seed, trial.variant)
    if trial.sweep == "gp_recursion":
        if a["kernel"] == "gibbs" and a["T"] == 8 and seed == 1:
            return "failed"
        return GP[(a["kernel"], a["T"])][seed]
    raise AssertionError(trial)


def energy_history(T: int, seed: int) -> list[tuple[int, float]]:
    return [(t, 5.0 - 0.7 * t - 0.1 * seed) for t in range(T + 1)]


def populate(uri: str, artifact_root: Path, order: list[str]) -> dict[str, object]:
    """Write every trial of the sweeps in ``order`` (shared configs once). Returns hash -> value."""
    from cemlab.sweeps.sweepfile.load import load_sweep

    w = RunWriter(uri, artifact_root)
    written: dict[str, object] = {}
    for name in order:
        parent = w.parent(name)
        for t in load_sweep(name).expand("smoke"):
            if t.config_hash in written:
                continue
            v = value_of(t)
            written[t.config_hash] = v
            if v == "missing":
                continue
            if isinstance(v, str):
                metrics = {schema.PARAMS_TOTAL: params_of(t)}
                if v == "diverged":
                    metrics[schema.TEST_PPL] = math.nan
                w.trial(t, status=v, metrics=metrics, parent_id=parent)
                continue
            if t.task == "gp":
                metrics = {schema.TEST_RMSE: v, schema.PARAMS_TOTAL: params_of(t),
                           schema.FLOPS_PER_EXAMPLE: 1000.0 * t.axes["T"]}
            else:
                metrics = lm_metrics(v, params=params_of(t))
            hist = {}
            if name == "recursion_ablation":
                T = t.axes.get("T", 1)
                sub = "attn" if t.group == "cem-attn" else "mlp"
                if t.group != "llama":
                    hist[schema.TEST_PPL_AT_STEPS] = [(k, v + abs(k - T)) for k in range(1, 2 * T + 1)]
                    hist[schema.energy_metric(sub, 0)] = energy_history(T, 0)
                    hist[schema.energy_metric(sub, 1)] = [(s, e - 1.0) for s, e in energy_history(T, 0)]
                hist[schema.TRAIN_LOSS] = [(s, 6.0 - 0.01 * s) for s in range(0, 300, 10)]
                hist[schema.VAL_PPL] = [(s, v + 100.0 / (1 + s)) for s in (50, 100, 150)]
            w.trial(t, metrics=metrics, histories=hist, parent_id=parent)
    return written


ORDER = ["attention_replacement", "mlp_replacement", "recursion_ablation", "lr_sweep", "kq_diagonal",
         "reuse_vs_recursion_mlp", "gp_recursion"]


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
