"""The names cemlab writes into MLflow, in one place: training writes them, reports read them.

Experiments: one per sweep (``cemlab/<sweep>``); ``cemlab train`` alone uses the config's
``tracking.experiment`` (default ``cemlab``).

Runs:
  - a *parent* run per sweep invocation (tag ``cemlab.role=sweep``);
  - a *child* run per trial (``cemlab.role=trial``), nested with the tag ``mlflow.parentRunId``;
  - a plain ``cemlab train`` run has ``cemlab.role=train``.

Params: the whole resolved ``RunConfig``, flattened with dots (``model.d_model``, ``train.lr``...).
"""

# --- tags -------------------------------------------------------------------------------------
PARENT_RUN_ID = "mlflow.parentRunId"      # MLflow's own nesting tag
ROLE = "cemlab.role"                      # sweep | trial | train
SWEEP = "cemlab.sweep"                    # sweep name, e.g. recursion_ablation
FIGURE = "cemlab.figure"                  # paper figure, e.g. "Fig 2c+2d"
SCALE = "cemlab.scale"                    # smoke | tiny | paper, or a ladder rung's scale (workstation-tpp5)
RUNG = "cemlab.rung"                      # a ladder rung's runs (trials, parent): tokens per parameter, e.g. "5"
CONFIG_HASH = "cemlab.config_hash"        # cemlab.config.config_hash(run_config)
TRIAL_ID = "cemlab.trial_id"              # stable id of the grid cell within its sweep
MODEL_KIND = "cemlab.model_kind"          # llama | cem-attn | cem-mlp | cem
SIZE = "cemlab.size"                      # size name: 86m ... (paper) or the scale's own names
VARIANT = "cemlab.variant"                # legend label of the cell, e.g. "cem-attn T2 dplr"
GROUP = "cemlab.group"                    # variant family of a sweep cell: llama, cem-attn, cem-mlp, cem, reuse-mlp, ...
AXIS_PREFIX = "cemlab.axis."              # one tag per grid coordinate of a sweep trial, see axis_tag()
STATUS = "cemlab.status"                  # running | finished | diverged | failed | interrupted | stopped
DIVERGED_STEP = "cemlab.diverged_step"    # optimizer step where the loss became NaN/inf
GIT_COMMIT = "cemlab.git_commit"
TASK = "cemlab.task"                      # lm | gp
REUSED_FROM = "cemlab.reused_from"        # on a sweep's parent: run ids reused from earlier sweeps (comma list)
ERROR = "cemlab.error"                    # type and message of the error of a failed run
STOPPED_STEP = "cemlab.stopped_step"      # optimizer step at which the scheduler (ASHA) stopped a trial
SEARCH_CELL = "cemlab.search_cell"        # search: optuna: trial id of the grid cell whose lr was searched
RECORDED_FROM_URI = "cemlab.recorded_from_uri"  # a run recorded from a runs folder's local result: the store it was first logged to
RECORDED_FROM_RUN = "cemlab.recorded_from_run"  # ... and its run id there
CONCURRENT_WITH = "cemlab.concurrent_with"      # on a sweep's parent: parent run of the same sweep running at the same time
OVERRIDES = "cemlab.overrides"            # a sweep trial's command-line config overrides (key=value ...)
MODEL_URI = "cemlab.model_uri"            # models:/<id> of the run's final model (mlflow.pytorch.load_model)
LOG_FILE = "cemlab.log_file"              # a sweep trial's log file (stdout, stderr, logging of its process)


def axis_tag(axis: str) -> str:
    """Tag holding a sweep trial's value on one grid axis (``size``, ``lr``, ``seed``, ``T``,
    ``precond``, ...), as a string: ``cemlab.axis.T = "2"``."""
    return f"{AXIS_PREFIX}{axis}"


# Values of the STATUS tag: the run outcomes, whose meaning and order ``cemlab.tracking.outcomes`` owns.
from cemlab.tracking.outcomes import DIVERGED as STATUS_DIVERGED  # noqa: E402
from cemlab.tracking.outcomes import FAILED as STATUS_FAILED  # noqa: E402
from cemlab.tracking.outcomes import FINISHED as STATUS_FINISHED  # noqa: E402
from cemlab.tracking.outcomes import INTERRUPTED as STATUS_INTERRUPTED  # noqa: E402
from cemlab.tracking.outcomes import RUNNING as STATUS_RUNNING  # noqa: E402
from cemlab.tracking.outcomes import STOPPED as STATUS_STOPPED  # noqa: E402

# --- metrics (history over ``step`` = optimizer step): plain names below tasks and tracking, see cemlab.metric_names
from cemlab.metric_names import (  # noqa: E402,F401
    TRAIN_LOSS, LR, TOKENS_SEEN, TOKENS_PER_S, FLOPS_PER_S, MFU, GRAD_NORM, EXAMPLES_SEEN,
    EXAMPLES_PER_S, VAL_LOSS, VAL_PPL, TEST_LOSS, TEST_PPL, TEST_RMSE, VAL_RMSE, TEST_PPL_AT_STEPS,
    TEST_RMSE_AT_STEPS, PARAMS_TOTAL, PARAMS_ATTENTION, PARAMS_MLP, PARAMS_EMBEDDING, PARAMS_HEAD,
    FLOPS_PER_TOKEN, FLOPS_PER_EXAMPLE, TOKEN_BUDGET, TOTAL_STEPS, DATA_TRAIN_TOKENS, GPU_PEAK_MIB, GPU_TOTAL_MIB,
    GPU_BUSY_SHARE,
)


def energy_metric(sublayer: str, layer: int) -> str:
    """Energy after each recursion step on a fixed validation batch, mean over tokens.

    Logged with ``step`` = recursion step t (0 = before the first step) at the end of training,
    and as ``energy/<sublayer>/L<layer>/final_drop`` summaries. ``sublayer`` is ``attn`` or ``mlp``."""
    return f"energy/{sublayer}/L{layer}"


def energy_drop_metric(sublayer: str, layer: int) -> str:
    """E(before the first step) - E(after the last step) on the same fixed validation batch, logged
    at each validation with ``step`` = optimizer step (> 0: the recursion descends its energy)."""
    return f"energy/{sublayer}/L{layer}/final_drop"


def step_size_metric(sublayer: str, layer: int) -> str:
    """eta_t of each recursion step of a CEM sublayer at the end of training (``step`` = t, 1-based):
    the fixed eta, 1/T, or the learned value."""
    return f"eta/{sublayer}/L{layer}"


def total_step_metric(sublayer: str, layer: int) -> str:
    """sum_t eta_t of a CEM sublayer at the end of training (T * eta for a fixed step size)."""
    return f"eta/{sublayer}/L{layer}/total"


# --- artifacts ---------------------------------------------------------------------------------
CONFIG_ARTIFACT = "config.yaml"           # the resolved RunConfig
REPORT_ARTIFACT_DIR = "report"            # on a sweep's parent run
