"""The metric names training logs to MLflow, which tasks name and tracking writes and reads.

Plain names with no imports, below both packages: the tasks say which of them are theirs
(``Task.val_metric``, ``Task.seen_metric``, ...), ``cemlab.tracking.schema`` re-exports them next
to the tag names, and neither package imports the other for them (importing ``cemlab.tasks``
would load every task, torch included). A task from outside cemlab names its own metrics in its
module."""

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

# The GPU a trial used, logged once at the end of training and on CUDA only (cemlab.train.callbacks.gpu_usage);
# ``cemlab plan --scale gpu`` reads them to choose trials per GPU (cemlab.sweeps.gpu_slots).
GPU_PEAK_MIB = "system/gpu_peak_mib"              # torch.cuda.max_memory_allocated during training, MiB
GPU_TOTAL_MIB = "system/gpu_total_mib"            # the device's total memory, MiB
GPU_BUSY_SHARE = "system/gpu_busy_share"          # training steps' time / the trial's slot time so far (0-1)
