#!/usr/bin/env bash
# One prepared session on a lent GPU machine (docs/gpu.md): install cemlab offline from the
# bundle that scripts/offline-bundle.py built, run the GPU tests, a `gpu`-scale sweep of
# recursion_ablation from a fresh runs folder (twice: the second invocation's trials have the
# first's shapes, so they show what the compile cache saves), the kernel benchmark, and write what
# each step found to $OUT as it goes. Every step runs under its own `timeout`, and all of them
# within --budget seconds (a step that would start with less than 30 s left is skipped, said so).
#
#   scripts/gpu-session.sh [--dry-run] [--budget S] [--out DIR] [STEP ...]
#
# Steps, in this order whatever the order given (default: all of them):
#   receive  unpack the bundle parts in $BUNDLE (default offline-bundle/) into its wheelhouse; the
#            parts may come one call at a time (each call unpacks what it brought)
#   install  python3 -m pip install --no-index --find-links $BUNDLE/wheelhouse cemlab
#   tests    pytest tests/test_gpu_paths.py tests/test_attention_kernels.py (each test under the
#            suite's own timeout, tests/gpu_support.py)
#   sweep    cemlab sweep recursion_ablation --scale gpu, $SWEEP_AXES, seed 0 then seed 1 (each
#            its own limit), one fresh runs folder; then scripts/gpu-results.py: the stage table,
#            each trial's time, tokens/s, MFU and first step, and seed 1's first step against seed 0's
#   bench    cemlab bench kernels at 86m (Llama, CEM attention on flex, full CEM T=2), compiled
#
# Files written to $OUT (8 at most, for runners that bring back only a few): summary.md (each step: its
# command, exit code, seconds), env.txt, install.log, tests.log, sweep.log, results.md, bench.log,
# sweep-files.tar.gz (stages.jsonl, summary.json, the report's index.md).
# The cemlab of this checkout runs (PYTHONPATH), the bundle supplies its dependencies.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
bundle=${BUNDLE:-$here/offline-bundle}
budget=570
dry=0
out=${OUT:-}
sweep_axes=${SWEEP_AXES:-"size=[86m] precond=[dplr] T=[2] eta=[1] lr=[2.0e-3]"}
declare -A limit=([receive]=60 [install]=150 [tests]=300 [sweep]=300 [bench]=150)
order=(receive install tests sweep bench)
chosen=()

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "gpu-session: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --budget) shift; [[ "${1:-}" =~ ^[0-9]+$ ]] || die "--budget needs a number of seconds, e.g. --budget 570"; budget=$1 ;;
    --out) shift; [ -n "${1:-}" ] || die "--out needs a folder"; out=$1 ;;
    -h|--help) usage; exit 0 ;;
    all) chosen+=("${order[@]}") ;;
    *) [ -n "${limit[$1]+x}" ] || die "unknown step '$1'; the steps are: ${order[*]} (or all)"; chosen+=("$1") ;;
  esac
  shift
done
[ ${#chosen[@]} -gt 0 ] || chosen=("${order[@]}")
[ -n "$out" ] || die "no folder for the results: set OUT or pass --out DIR"
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=true
start=$(date +%s)
summary=$out/summary.md

note() { echo "$*" | tee -a "$summary"; }

planned=0   # --dry-run: the seconds the steps before would take at their limits (the worst case)

# run STEP LOGFILE COMMAND...: the command under timeout(1), within the step's limit and the budget.
run() {
  local step=$1 log=$2 cmd; shift 2
  printf -v cmd '%q ' "$@"
  local elapsed=0
  [ "$dry" = 1 ] || elapsed=$(( $(date +%s) - start ))
  local left=$(( budget - elapsed - planned ))
  local t=${limit[$step]}
  [ "$t" -le $(( left - 10 )) ] || t=$(( left - 10 ))
  if [ "$t" -lt 30 ]; then
    note "- $step: skipped, ${left} s of the ${budget} s budget left$([ "$dry" = 1 ] && echo ' (at the limits)'): $cmd"
    return 3
  fi
  if [ "$dry" = 1 ]; then
    planned=$(( planned + t ))
    note "- $step (limit $t s, at most $planned s into the budget): $cmd > $(basename "$log")"
    return 0
  fi
  local t0=$(date +%s) rc
  echo "\$ $*" >> "$log"
  timeout -k 20 "$t" "$@" >> "$log" 2>&1
  rc=$?
  local why=""
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && why=" (timed out at $t s)"
  note "- $step: exit $rc$why, $(( $(date +%s) - t0 )) s: $cmd"
  return "$rc"
}

step_receive() {
  ls "$bundle"/cemlab-offline-*-of-*.tar >/dev/null 2>&1 || [ "$dry" = 1 ] || {
    note "- receive: no part (cemlab-offline-K-of-N.tar) in $bundle"; return 2; }
  run receive "$out/install.log" sh "$bundle/install.sh" unpack
}

step_install() {
  run install "$out/install.log" sh "$bundle/install.sh" install cemlab || return
  [ "$dry" = 1 ] || "$py" -c "import cemlab, mlflow, ray, optuna, pydantic; print('cemlab from', cemlab.__file__)" \
    >> "$out/install.log" 2>&1
}

step_tests() {
  run tests "$out/tests.log" "$py" -m pytest -q -p no:cacheprovider -rs --durations=15 \
    tests/test_gpu_paths.py tests/test_attention_kernels.py
}

# sweep_seed SEED: one invocation, its stage timestamps kept apart (stages-seedN.jsonl: the next
# invocation would add to them; the sweep keeps each invocation's summary-<parent run>.json itself)
sweep_seed() {
  local rc=0 logs=$CEMLAB_RUNS_DIR/logs/recursion_ablation-gpu
  # shellcheck disable=SC2086
  run sweep "$out/sweep.log" "$py" -m cemlab.cli sweep recursion_ablation --scale gpu $sweep_axes "seed=[$1]" \
    --no-seeding --plain || rc=$?
  [ -f "$logs/stages.jsonl" ] && mv "$logs/stages.jsonl" "$logs/stages-seed$1.jsonl"
  return "$rc"
}

step_sweep() {
  local runs=$here/.gpu-session/runs-$(date +%Y%m%d-%H%M%S) rc=0
  export CEMLAB_RUNS_DIR=$runs CEMLAB_REPORTS_DIR=$runs/reports
  [ "$dry" = 1 ] || mkdir -p "$runs"
  sweep_seed 0 || rc=$?
  [ "$rc" = 0 ] && { sweep_seed 1 || rc=$?; }   # the same shapes again: served from <runs>/compile-cache
  [ "$dry" = 1 ] && { note "- results: scripts/gpu-results.py --runs $runs > results.md"; return 0; }
  "$py" -m cemlab.cli ui --stop >> "$out/sweep.log" 2>&1
  "$py" "$here/scripts/gpu-results.py" --runs "$runs" --sweep recursion_ablation --scale gpu \
    > "$out/results.md" 2>> "$out/sweep.log"
  (cd "$runs" && tar -czf "$out/sweep-files.tar.gz" logs/*/stages*.jsonl logs/*/summary*.json \
    reports/*/index.md 2>/dev/null)
  return "$rc"
}

step_bench() {
  run bench "$out/bench.log" "$py" -m cemlab.cli bench kernels --presets 86m --variants llama "cem-attn flex" \
    "cem T2" --compile on --steps 10 --rounds 2
}

: > "$summary"
note "# GPU session $(date -u '+%Y-%m-%d %H:%M UTC'), budget $budget s$([ "$dry" = 1 ] && echo ', dry run: nothing is run')"
if [ "$dry" = 0 ]; then
  { nvidia-smi 2>&1; "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
    nproc; free -g; "$py" -m pip list 2>/dev/null; } > "$out/env.txt"
fi
failed=0
for step in "${order[@]}"; do
  for c in "${chosen[@]}"; do
    if [ "$c" = "$step" ]; then "step_$step" || failed=1; break; fi
  done
done
note "done in $(( $(date +%s) - start )) s"
exit "$failed"
