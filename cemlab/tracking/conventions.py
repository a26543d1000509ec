"""MLflow's own conventions on every cemlab run, so MLflow's UI, ``search_runs`` filters and
model registry work on cemlab runs as they do on anyone's.

What a run gets (rank zero only, beside the ``cemlab.*`` tags of :mod:`cemlab.tracking.mlflow_run`):

* **system tags** MLflow's UI columns read: ``mlflow.user`` (the login name, never "unknown"),
  ``mlflow.source.name`` (the command that reproduces the run), ``mlflow.source.type`` (LOCAL),
  ``mlflow.source.git.commit`` / ``.branch`` / ``.repoURL`` of the cemlab checkout, and
  ``mlflow.runName``;
* a **description** (``mlflow.note.content``, the run page's Description): model kind, size, T,
  eta, preconditioner, token budget, and the sweep, scale and figure it feeds (:func:`description`);
* **dataset inputs** (``MlflowClient.log_inputs``): one MLflow dataset per split, named after the
  corpus, with its source (local folder or Hugging Face dataset), the token cache's fingerprint and
  the split as the digest (``<fingerprint>-train``), and the split's token count and documents in its profile; the split is the
  ``mlflow.data.context`` tag (``train`` / ``validation`` / ``test``). ``search_runs`` can then
  filter on ``dataset.name`` / ``dataset.digest`` / ``dataset.context``;
* **system metrics** (CPU, memory, disk, network, and GPU utilisation and memory where NVML sees a
  GPU) from MLflow's own ``SystemMetricsMonitor`` thread, as ``system/*`` metrics. Off with
  ``tracking.system_metrics=false`` or MLflow's own ``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=false``;
  the sampling interval is MLflow's ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` (default 10 s);
* the **final model** as an MLflow LoggedModel (``mlflow.pytorch`` flavour, pickled module),
  linked to the run as its output at the last step; its URI ``models:/<model_id>`` is also the
  run's ``cemlab.model_uri`` tag. Load it (with cemlab installed) with::

      mlflow.set_tracking_uri(URI)
      model = mlflow.pytorch.load_model(run.data.tags["cemlab.model_uri"])  # a cemlab.models module

  ``tracking.log_model``: true / false; null (default) logs it except at the ``smoke`` scale.

A sweep's parent run also shows the trials it **reused** from earlier sweeps, as *link runs*
(:func:`link_reused_runs`): MLflow nests a run under one parent only, so the reused run stays
where it ran and a finished child of the new parent, tagged ``cemlab.role=link``, links to it.

Everything goes through an explicit ``MlflowClient`` (never MLflow's fluent global state), as in
:mod:`cemlab.tracking.mlflow_run`.

MLflow is imported inside the functions that use it, so ``cemlab sweep`` refuses a bad sweep file
without loading it.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import pwd
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import cemlab
from cemlab.tracking import schema
from cemlab.tasks import format_lr, task_of
from cemlab.tracking.mlflow_run import git_commit, model_kind, size_label
from cemlab.tracking.store import get_client, search_runs
from cemlab.version import UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from mlflow import MlflowClient

    from cemlab.config import RunConfig

log = logging.getLogger("cemlab.tracking")

#: MLflow's own switch for system metrics (read here so that ``false`` turns cemlab's sampler off too).
SYSTEM_METRICS_ENV = "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"


# ---------------------------------------------------------------------------------------------
# System tags and the description
# ---------------------------------------------------------------------------------------------


def mlflow_user() -> str:
    """The login name: ``getpass`` (``$LOGNAME``/``$USER``/the password database), else the uid's
    password entry, else ``uid<N>`` (a container without a user entry): never MLflow's "unknown"."""
    try:
        name = getpass.getuser()
        if name:
            return name
    except Exception:  # getpass raises OSError/KeyError without an entry in /etc/passwd
        pass
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid{os.getuid()}"


def _git(*args: str) -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def source_command(cfg: "RunConfig") -> str:
    """The command that reproduces the run: ``cemlab sweep <sweep> --scale <scale>`` for a sweep
    trial, else ``cemlab train``."""
    tags = cfg.tracking.tags
    if schema.SWEEP in tags:
        scale = tags.get(schema.SCALE)
        return f"cemlab sweep {tags[schema.SWEEP]}" + (f" --scale {scale}" if scale else "")
    return "cemlab train"


def system_tags(cfg: "RunConfig | None", run_name: str | None, note: str | None = None,
                source: str | None = None) -> dict[str, str]:
    """MLflow's ``mlflow.*`` system tags of a run (see the module docstring); ``source`` for a run
    without a config (a sweep's parent run)."""
    from mlflow.entities import SourceType
    from mlflow.utils import mlflow_tags as mt

    tags = {mt.MLFLOW_USER: mlflow_user(), mt.MLFLOW_SOURCE_NAME: source or source_command(cfg),
            mt.MLFLOW_SOURCE_TYPE: SourceType.to_string(SourceType.LOCAL)}
    if run_name:
        tags[mt.MLFLOW_RUN_NAME] = run_name
    commit = git_commit()
    if commit:
        tags[mt.MLFLOW_GIT_COMMIT] = commit
        branch = _git("rev-parse", "--abbrev-ref", "HEAD")
        if branch and branch != "HEAD":
            tags[mt.MLFLOW_GIT_BRANCH] = branch
        remote = _git("config", "--get", "remote.origin.url")
        if remote:
            tags[mt.MLFLOW_GIT_REPO_URL] = remote
    if note:
        tags[mt.MLFLOW_RUN_NOTE] = note
    return tags


def description(cfg: "RunConfig", params: int | None = None, budget: int | None = None) -> str:
    """One or two sentences on what the run is, for the run page (``mlflow.note.content``)."""
    t, tags = cfg.train, cfg.tracking.tags
    task = task_of(cfg)
    what, unit, corpus = task.describe(cfg, params), task.unit, task.budget_of(cfg)
    amount = f"{budget:,} {unit}{corpus}" if budget else f"{t.tokens} {unit}{corpus}"
    text = f"{what}. Trained on {amount} at peak lr {format_lr(t.lr)}, seed {t.seed}."
    if schema.SWEEP in tags:
        text += (f" Trial {tags.get(schema.TRIAL_ID, '')} of sweep {tags[schema.SWEEP]} at scale "
                 f"{tags.get(schema.SCALE, '?')}, for the paper's {tags.get(schema.FIGURE, '?')}.")
    return text


# ---------------------------------------------------------------------------------------------
# Dataset inputs
# ---------------------------------------------------------------------------------------------

#: cemlab's split names -> ``mlflow.data.context`` values.
SPLIT_CONTEXT = {"train": "train", "val": "validation", "test": "test"}


def corpus_name(cfg: "RunConfig") -> str:
    return task_of(cfg).corpus_name(cfg)


def dataset_inputs(cfg: "RunConfig", stats: dict[str, Any], split_sizes: dict[str, int]) -> list:
    """One ``DatasetInput`` per split: name = corpus, digest = the token cache's fingerprint (GP:
    the config hash of its data settings), profile = tokens (examples), documents, tokenizer."""
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    cache_path = stats.get("cache_path")
    if cache_path:  # <kind>-<tokenizer>-<16 hex digits of the selection, tokenizer and format>
        digest = Path(cache_path).name.rsplit("-", 1)[-1]
    else:
        payload = json.dumps(cfg.gp.model_dump(mode="json") if cfg.gp else {}, sort_keys=True)
        digest = hashlib.sha256(payload.encode()).hexdigest()[:16]
    task = task_of(cfg)
    source, unit = task.dataset_source(cfg), task.unit
    out = []
    for split, context in SPLIT_CONTEXT.items():
        profile = {unit: int(split_sizes.get(split, 0))}
        for key in ("documents", "chars"):
            if isinstance(stats.get(key), dict) and split in stats[key]:
                profile[key] = int(stats[key][split])
        for key in ("tokenizer", "vocab_size"):
            if key in stats:
                profile[key] = stats[key]
        # One digest per split (MLflow keys a dataset by name and digest, and a split is other data).
        ds = _ProfiledDataset(source=source, name=corpus_name(cfg), digest=f"{digest}-{split}", profile=profile)
        out.append(DatasetInput(ds._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)]))
    return out


def _profiled_dataset_class():
    from mlflow.data.meta_dataset import MetaDataset

    class ProfiledDataset(MetaDataset):
        """MLflow's metadata-only dataset with a profile (token counts)."""

        def __init__(self, *, profile: dict[str, Any], **kwargs):
            self._profile = profile
            super().__init__(**kwargs)

        @property
        def profile(self) -> dict[str, Any]:
            return self._profile

        def to_dict(self) -> dict[str, str]:
            return {**super().to_dict(), "profile": json.dumps(self._profile)}

    return ProfiledDataset


def _ProfiledDataset(**kwargs):  # noqa: N802 (built lazily: mlflow.data imports are slow)
    return _profiled_dataset_class()(**kwargs)


# ---------------------------------------------------------------------------------------------
# One call at run creation
# ---------------------------------------------------------------------------------------------


def log_run_conventions(client: "MlflowClient", run_id: str, cfg: "RunConfig", run_name: str, *,
                        data_stats: dict[str, Any], split_sizes: dict[str, int], params: int | None = None,
                        budget: int | None = None, step_notes: str = "") -> dict[str, str]:
    """Set the system tags and the description (``step_notes``, what each CEM step is, appended)
    and log the dataset inputs of a new run; return the tags set (a copy of the run recorded into
    another store carries them: ``cemlab.train.run_action.record_from_local``)."""
    from mlflow.entities import RunTag

    text = description(cfg, params=params, budget=budget)
    tags = system_tags(cfg, run_name, f"{text} {step_notes}" if step_notes else text)
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    try:
        client.log_inputs(run_id, datasets=dataset_inputs(cfg, data_stats, split_sizes))
    except Exception as e:  # a store without dataset support must not stop training
        log.warning("could not log the dataset inputs of run %s: %s", run_id, e)
    return tags


# ---------------------------------------------------------------------------------------------
# System metrics
# ---------------------------------------------------------------------------------------------


def system_metrics_enabled(cfg: "RunConfig") -> bool:
    """``tracking.system_metrics`` when set, else MLflow's ``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING``
    when set, else on."""
    if cfg.tracking.system_metrics is not None:
        return cfg.tracking.system_metrics
    env = os.environ.get(SYSTEM_METRICS_ENV)
    if env is not None and env.strip():
        return env.strip().lower() in ("1", "true", "yes", "on")
    return True


def start_system_metrics(cfg: "RunConfig", tracking_uri: str, run_id: str, resume: bool = False):
    """Start MLflow's ``SystemMetricsMonitor`` on ``run_id`` (a daemon thread); returns it, or None
    when switched off or when its dependency (psutil) is missing. Stop it with ``.finish()``
    before the run is terminated (it stops by itself once the run is no longer RUNNING)."""
    if not system_metrics_enabled(cfg):
        return None
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    except ImportError as e:
        log.warning("system metrics off: %s (pip install psutil)", e)
        return None
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    monitor = SystemMetricsMonitor(run_id, resume_logging=resume, tracking_uri=tracking_uri)
    monitor.start()
    return monitor


# ---------------------------------------------------------------------------------------------
# The final model
# ---------------------------------------------------------------------------------------------


def log_model_enabled(cfg: "RunConfig") -> bool:
    if cfg.tracking.log_model is not None:
        return cfg.tracking.log_model
    return cfg.tracking.tags.get(schema.SCALE) != "smoke"


def log_final_model(client: "MlflowClient", run_id: str, model, cfg: "RunConfig", step: int) -> str:
    """Log ``model`` (a ``torch.nn.Module``, moved to the CPU) as an MLflow LoggedModel of the
    ``mlflow.pytorch`` flavour, linked as the run's output at ``step``; returns ``models:/<id>``,
    also set as the run's ``cemlab.model_uri`` tag."""
    import mlflow.pytorch
    import torch
    from mlflow.entities import LoggedModelOutput

    experiment_id = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(
        experiment_id, name="model", source_run_id=run_id, model_type="cemlab",
        tags={schema.CONFIG_HASH: cfg.hash(), schema.MODEL_KIND: model_kind(cfg), schema.SIZE: size_label(cfg)})
    version = cemlab.__version__  # the installed metadata's, else the source checkout's (cemlab.version)
    reqs = [f"torch=={torch.__version__.split('+')[0]}", "cemlab" if version == UNKNOWN else f"cemlab=={version}"]
    quiet = logging.getLogger("mlflow.pytorch")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the pickle-format caution: the model is a cemlab module, loaded with cemlab
    try:
        with tempfile.TemporaryDirectory() as tmp:
            mlflow.pytorch.save_model(model.cpu().eval(), f"{tmp}/model", pip_requirements=reqs,
                                      serialization_format="pickle")
            client.log_model_artifacts(logged.model_id, f"{tmp}/model")
    except BaseException:
        client.finalize_logged_model(logged.model_id, "FAILED")
        raise
    finally:
        quiet.setLevel(level)
    client.finalize_logged_model(logged.model_id, "READY")
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step)])
    uri = f"models:/{logged.model_id}"
    client.set_tag(run_id, schema.MODEL_URI, uri)
    return uri


# ---------------------------------------------------------------------------------------------
# Reused trials under the sweep that reused them
# ---------------------------------------------------------------------------------------------

#: On a link run: the id of the run it stands for.
LINKED_RUN = "cemlab.linked_run_id"
#: ``cemlab.role`` of a link run.
ROLE_LINK = "link"
#: Tags copied onto a link run: what the UI's columns and a comparison view show. Never the config
#: hash, the sweep or the search cell, so that no store lookup takes a link for a trial's run.
_LINK_TAGS = (schema.TRIAL_ID, schema.VARIANT, schema.GROUP, schema.SIZE, schema.MODEL_KIND, schema.SCALE,
              schema.FIGURE, schema.TASK)


#: The query that opens MLflow 3's UI in its "Model training" view of an experiment (its runs
#: table) rather than the GenAI overview of traces: the UI takes its mode from this query, else
#: from the browser's stored choice (the experiment tag ``mlflow.experimentKind`` does not change
#: it). Every link cemlab prints or writes carries it.
ML_VIEW = "workflowType=machine_learning"


def _ui_link(tracking_uri: str, path: str) -> str:
    return f"{tracking_uri.rstrip('/')}/{path}" if tracking_uri.startswith(("http://", "https://")) else path


def experiment_url(tracking_uri: str, experiment_id: str) -> str:
    """The experiment's runs table in MLflow's UI (model-training view): absolute on a server,
    the UI's own fragment otherwise."""
    return _ui_link(tracking_uri, f"#/experiments/{experiment_id}?{ML_VIEW}")


def experiments_url(tracking_uri: str, experiment_ids: list[str]) -> str:
    """The runs of several experiments in one table (MLflow's experiment comparison, model-training
    view); one experiment: its own runs table (:func:`experiment_url`)."""
    if len(experiment_ids) == 1:
        return experiment_url(tracking_uri, experiment_ids[0])
    ids = quote(json.dumps(sorted(experiment_ids), separators=(",", ":")), safe="")
    return _ui_link(tracking_uri, f"#/compare-experiments/s?experiments={ids}&{ML_VIEW}")


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in MLflow's UI (model-training view): absolute on a server, the UI's own
    fragment otherwise."""
    return _ui_link(tracking_uri, f"#/experiments/{experiment_id}/runs/{run_id}?{ML_VIEW}")


def run_link(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """What a command prints for a run: its page on a server (:func:`run_url`; a sweep's parent
    run lists its trials there as child runs), else the store's URI (no UI serves it)."""
    if tracking_uri.startswith(("http://", "https://")):
        return run_url(tracking_uri, experiment_id, run_id)
    return tracking_uri


def experiment_link(tracking_uri: str, experiment_id: str) -> str:
    """The experiment's runs table on a server (:func:`experiment_url`), else the store's URI."""
    if tracking_uri.startswith(("http://", "https://")):
        return experiment_url(tracking_uri, experiment_id)
    return tracking_uri


def runs_table_link(tracking_uri: str, run_id: str) -> str:
    """The runs table of ``run_id``'s experiment on a server (the run is listed there), else the
    store's URI: what ``cemlab train`` prints instead of MLflow's bare experiment link."""
    if not tracking_uri.startswith(("http://", "https://")):
        return tracking_uri
    try:
        experiment_id = get_client(tracking_uri).get_run(run_id).info.experiment_id
    except Exception as e:  # the run is trained and logged; only the link is missing
        log.warning("could not look up the experiment of run %s: %s", run_id, e)
        return tracking_uri
    return experiment_url(tracking_uri, experiment_id)


def link_reused_runs(client: "MlflowClient", parent_run_id: str, runs: list) -> list[str]:
    """Show runs a sweep reused from earlier sweeps under its parent run (MLflow nests a run under
    one parent only). Each gets a *link run*: a finished child of ``parent_run_id`` named
    ``<run name> (reused)``, tagged ``cemlab.role=link`` and ``cemlab.linked_run_id``, with the
    reused run's params, its final metric values (``system/`` ones left out), its display tags and
    a description linking to it, so the parent's grid and comparison views hold every trial.
    Idempotent (a run already linked from this parent is not linked again). Returns the new ids."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    parent = client.get_run(parent_run_id)
    experiment_id = parent.info.experiment_id
    existing = search_runs(client, [experiment_id], f"tags.`{schema.PARENT_RUN_ID}` = '{parent_run_id}' and "
                                                    f"tags.`{schema.ROLE}` = '{ROLE_LINK}'")
    linked = {r.data.tags.get(LINKED_RUN) for r in existing}
    made = []
    for run in runs:
        if run.info.run_id in linked or run.data.tags.get(schema.PARENT_RUN_ID) == parent_run_id:
            continue
        tags = {k: v for k, v in run.data.tags.items() if k in _LINK_TAGS or k.startswith(schema.AXIS_PREFIX)}
        tracking_uri = client.tracking_uri if isinstance(client.tracking_uri, str) else ""
        source = run.data.tags.get(schema.SWEEP, "cemlab train")
        tags.update({schema.ROLE: ROLE_LINK, LINKED_RUN: run.info.run_id, schema.PARENT_RUN_ID: parent_run_id,
                     MLFLOW_RUN_NOTE: f"Reused: this trial's result is run [{run.info.run_name}]"
                                      f"({run_url(tracking_uri, run.info.experiment_id, run.info.run_id)}) of "
                                      f"{source}, matched by config hash {run.data.tags.get(schema.CONFIG_HASH, '?')}. "
                                      "This run is a link that shows it in this sweep's grid; its params and final "
                                      "metrics are copies."})
        child = client.create_run(experiment_id, run_name=f"{run.info.run_name} (reused)", tags=tags)
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in run.data.metrics.items() if not k.startswith("system/")]
        params = [Param(k, v) for k, v in run.data.params.items()]
        for i in range(0, max(len(metrics), len(params), 1), 100):
            client.log_batch(child.info.run_id, metrics=metrics[i:i + 100], params=params[i:i + 100])
        client.set_terminated(child.info.run_id, "FINISHED")
        made.append(child.info.run_id)
    return made


# ---------------------------------------------------------------------------------------------
# A sweep's comparison view
# ---------------------------------------------------------------------------------------------

#: On a sweep's parent run: MLflow's compare page of its trials.
COMPARE_URL = "cemlab.compare_url"


def compare_url(tracking_uri: str, experiment_ids: list[str], run_ids: list[str]) -> str:
    """MLflow's run-comparison page (parallel coordinates, scatter, box and contour plots of params
    against metrics, and the param and metric tables side by side) of ``run_ids``."""
    query = (f"?runs={quote(json.dumps(sorted(run_ids), separators=(',', ':')), safe='[],')}"
             f"&experiments={quote(json.dumps(sorted(set(experiment_ids)), separators=(',', ':')), safe='[],')}"
             f"&{ML_VIEW}")
    return _ui_link(tracking_uri, f"#/compare-runs{query}")


#: Params that differ between every trial and say nothing of its model (seed, names, paths).
_NOT_AXES = ("train.seed", "tracking.", "data.path", "data.cache")


def varying_params(runs: list) -> list[str]:
    """The params whose values differ between ``runs`` (MLflow runs): the axes the sweep varies at
    its scale, the seed and bookkeeping left out."""
    values: dict[str, set] = {}
    for r in runs:
        for k, v in r.data.params.items():
            values.setdefault(k, set()).add(v)
    keys = {k for k, v in values.items() if len(v) > 1 or any(k not in r.data.params for r in runs)}
    return sorted(k for k in keys if not k.startswith(_NOT_AXES))


def main_metric(runs: list) -> str:
    """The sweep's main metric: test perplexity, or test RMSE for a GP sweep."""
    has_rmse = any(schema.TEST_RMSE in r.data.metrics for r in runs)
    return schema.TEST_RMSE if has_rmse and not any(schema.TEST_PPL in r.data.metrics for r in runs) else schema.TEST_PPL


def describe_sweep_run(client: "MlflowClient", parent_run_id: str, *, sweep: str, figure: str, scale: str,
                       description: str, run_ids: list[str]) -> str:
    """The sweep's parent run: a description (``mlflow.note.content``, its run page) saying what
    the sweep reproduces, with a link to MLflow's comparison view of all its trials (run here or
    reused; the view researchers open first: parallel coordinates of the axes against test
    perplexity), also kept in the tag ``cemlab.compare_url``. Returns the URL."""
    from mlflow.entities import RunTag
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    uri = client.tracking_uri if isinstance(client.tracking_uri, str) else ""
    runs = [client.get_run(r) for r in run_ids]
    experiments = [client.get_run(parent_run_id).info.experiment_id] + [r.info.experiment_id for r in runs]
    url = compare_url(uri, experiments, run_ids)
    axes = varying_params(runs)
    choose = (f"choose the params this sweep varies at scale {scale}, " + ", ".join(f"`{a}`" for a in axes)
              if axes else "every trial has the same params apart from the seed")
    note = (f"Sweep **{sweep}** ({figure}) at scale {scale}. {description.strip()}\n\n"
            f"[Compare its {len(run_ids)} trials]({url}): MLflow's parallel coordinates ({choose}; and the metric "
            f"`{main_metric(runs)}`), scatter and box plots. Trials reused from other sweeps are shown here as link "
            f"runs (`cemlab.role = link`). Report: `cemlab report {sweep} --scale {scale}` (also in this run's "
            f"artifacts).")
    tags = system_tags(None, None, note, source=f"cemlab sweep {sweep} --scale {scale}")
    tags[COMPARE_URL] = url[:5000]
    client.log_batch(parent_run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    return url
