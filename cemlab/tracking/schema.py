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
SCALE = "cemlab.scale"                    # smoke | tiny | paper
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

# --- metrics (history over ``step`` = optimizer step) ------------------------------------------
TRAIN_LOSS = "train/loss"
LR = "train/lr"
TOKENS_SEEN = "train/tokens"
TOKENS_PER_S = "train/tokens_per_s"
FLOPS_PER_S = "train/model_flops_per_s"
MFU = "train/mfu"
GRAD_NORM = "train/grad_norm"             # gradient norm before clipping
EXAMPLES_SEEN = "train/examples"          # GP study: examples seen (LM runs count tokens)
EXAMPLES_PER_S = "train/examples_per_s"
VAL_LOSS = "val/loss"
VAL_PPL = "val/ppl"
TEST_LOSS = "test/loss"
TEST_PPL = "test/ppl"                     # the paper's main metric
TEST_RMSE = "test/rmse"                   # GP study (Table 3)
VAL_RMSE = "val/rmse"
# Test-time recursion curve: test perplexity with the recursion steps changed at evaluation only;
# logged as TEST_PPL_AT_STEPS with ``step`` = the number of recursion steps T'.
TEST_PPL_AT_STEPS = "test/ppl_at_steps"
TEST_RMSE_AT_STEPS = "test/rmse_at_steps"  # GP study: the same curve for RMSE


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


# Static model facts, logged once (step 0).
PARAMS_TOTAL = "model/params_total"
PARAMS_ATTENTION = "model/params_attention"
PARAMS_MLP = "model/params_mlp"
PARAMS_EMBEDDING = "model/params_embedding"
PARAMS_HEAD = "model/params_head"
FLOPS_PER_TOKEN = "model/flops_per_token"         # training FLOPs (fwd+bwd) per token
FLOPS_PER_EXAMPLE = "model/flops_per_example"     # GP study (Table 3): forward FLOPs per example
TOKEN_BUDGET = "train/token_budget"
TOTAL_STEPS = "train/total_steps"                 # optimizer steps the budget asks for
DATA_TRAIN_TOKENS = "data/train_tokens"           # size of the training split (tokens; GP: examples)

# --- artifacts ---------------------------------------------------------------------------------
CONFIG_ARTIFACT = "config.yaml"           # the resolved RunConfig
REPORT_ARTIFACT_DIR = "report"            # on a sweep's parent run
