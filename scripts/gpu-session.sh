#!/usr/bin/env bash
# One prepared session on a lent GPU machine (docs/gpu.md): install cemlab offline from the
# bundle that scripts/offline-bundle.py built, then measure on the GPU: the kernel benchmark at
# 86m, the main job's grid at the `gpu` scale (54 trials from a fresh runs folder), and the same
# grid over two sizes (86m and 108m). Every step runs under its own `timeout` (its limit below, or
# --limit STEP=S), and all of them within --budget seconds (default 570): a step that would get
# less than 30 s (or its own limit, where smaller) is skipped, said so.
#
#   scripts/gpu-session.sh [--dry-run] [--budget S] [--limit STEP=S] [--out DIR] [STEP ...]
#
# The machine may run each call in a fresh copy of the checkout: nothing a call needs from an
# earlier one is kept inside the checkout. It is kept in $GPU_SESSION_STATE (default
# /tmp/cemlab-gpu-session), which lasts as long as the machine: the bundle's unpacked wheels, the
# runs folder, every log and table, and the record of a finished install.
#
# Steps, in this order whatever the order given (default: receive install bench main sizes; all:
# every step):
#   receive  copy the bundle parts in $BUNDLE (default offline-bundle/) and its install.sh into the
#            state folder and unpack them into its wheelhouse; the parts may come one call at a
#            time (each call unpacks what it brought, the wheelhouse keeps the earlier ones, and a
#            wheel cut across parts is joined once all its pieces are here)
#   install  once every part K of N is here: python3 -m pip install --no-index --find-links
#            <state>/bundle/wheelhouse cemlab (into the machine's Python, which keeps it)
#   bench    cemlab bench kernels at 86m, batch 8 x 2048, bf16, compiled: Llama, CEM attention on
#            flex, full CEM T=2
#   main     cemlab sweep recursion_ablation --scale gpu $MAIN_AXES (the main job's grid: 9 cells x
#            2 rates x 3 seeds = 54 trials, --no-bracketing: the grid the 5-minute target is set
#            for) in <state>/runs; then main.md (scripts/gpu-results.py:
#            the stage table with the training share, every trial's time, tokens/s and MFU)
#   sizes    the same grid over $SIZES_AXES (86m and 108m: 108 trials, and with the file's
#            bracketing step up to 54 more, so that its verdicts can be decisive) in the same runs
#            folder: main's finished trials are reused, its unfinished ones resumed; the sweep's report
#            (per-size verdicts and flips), sizes.md
#   tests    pytest tests/test_gpu_paths.py tests/test_attention_kernels.py
#   sweep    the compile cache's check: $SWEEP_AXES seed 0 then seed 1 in <state>/runs-cache;
#            sweep.md (seed 1's first step against seed 0's)
# A step that needs the install (bench and after) refuses to run where this machine has none.
# A sweep stopped at its limit is stopped cleanly (SIGTERM, its runs marked interrupted); its
# tables are written from what finished, and running the step again resumes it.
#
# Files to $OUT after every step (8 at most), each call bringing back what earlier calls on this
# machine wrote too: summary.md (every step of every call: command, exit code, seconds), env.txt,
# bench.log, main.md, sizes.md, sweep.md, session.tar.gz (every log and table, the sweeps'
# stages*.jsonl and summary*.json), report.tar.gz (the sweep's report, no PDFs).
# The cemlab of this checkout runs (PYTHONPATH), the bundle supplies its dependencies.
# GPU_SESSION_STAND_IN, where set, is put in front of every command that needs a GPU or what a GPU
# step wrote (cemlab's sweep, bench and ui, pytest, scripts/gpu-results.py): the CPU test's stand-in.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 2
py=${PYTHON:-python3}
bundle=${BUNDLE:-$here/offline-bundle}
state=${GPU_SESSION_STATE:-/tmp/cemlab-gpu-session}
budget=570
dry=0
out=${OUT:-}
main_axes=${MAIN_AXES:-"size=[86m] precond=[dplr] lr=[2.0e-3,4.0e-3] --no-bracketing"}
sizes_axes=${SIZES_AXES:-"size=[86m,108m] precond=[dplr] lr=[2.0e-3,4.0e-3]"}
sweep_axes=${SWEEP_AXES:-"size=[86m] precond=[dplr] T=[2] eta=[1] lr=[2.0e-3]"}
stand_in=(${GPU_SESSION_STAND_IN:+"$GPU_SESSION_STAND_IN"})
declare -A limit=([receive]=30 [install]=90 [bench]=150 [main]=330 [sizes]=480 [tests]=300 [sweep]=300)
order=(receive install bench main sizes tests sweep)
default=(receive install bench main sizes)
reserve=60   # kept after a sweep for its clean stop's tail and its tables (the limits below)
chosen=()

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "gpu-session: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --budget) shift; [[ "${1:-}" =~ ^[0-9]+$ ]] || die "--budget needs a number of seconds, e.g. --budget 570"; budget=$1 ;;
    --limit) shift
      [[ "${1:-}" =~ ^([a-z]+)=([1-9][0-9]*)$ ]] && [ -n "${limit[${BASH_REMATCH[1]}]+x}" ] \
        || die "--limit needs STEP=SECONDS for one of the steps (${order[*]}), e.g. --limit main=300"
      limit[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]} ;;
    --out) shift; [ -n "${1:-}" ] || die "--out needs a folder"; out=$1 ;;
    -h|--help) usage; exit 0 ;;
    all) chosen+=("${order[@]}") ;;
    *) [ -n "${limit[$1]+x}" ] || die "unknown step '$1'; the steps are: ${order[*]} (or all)"; chosen+=("$1") ;;
  esac
  shift
done
[ ${#chosen[@]} -gt 0 ] || chosen=("${default[@]}")
[ -n "$out" ] || die "no folder for the results: set OUT or pass --out DIR"
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
results=$state/results
runs=$state/runs
if [ "$dry" = 1 ]; then
  summary=$out/summary.md
  : > "$summary"
else
  mkdir -p "$results" || die "cannot create $results"
  summary=$results/summary.md
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=true
start=$(date +%s)

note() { echo "$*" | tee -a "$summary"; }

planned=0   # --dry-run: the seconds the steps before would take at their limits (the worst case)

# run STEP LOGFILE COMMAND...: the command under timeout(1), within the step's limit and the budget
# (less `keep` seconds, which the step needs after it).
keep=0
run() {
  local step=$1 log=$2 cmd; shift 2
  printf -v cmd '%q ' "$@"
  local elapsed=0
  [ "$dry" = 1 ] || elapsed=$(( $(date +%s) - start ))
  local left=$(( budget - elapsed - planned ))
  local t=${limit[$step]} least=30
  [ "$t" -le $(( left - 10 - keep )) ] || t=$(( left - 10 - keep ))
  [ "${limit[$step]}" -ge "$least" ] || least=${limit[$step]}
  if [ "$t" -lt "$least" ]; then
    note "- $step: skipped, ${left} s of the ${budget} s budget left$([ "$dry" = 1 ] && echo ' (at the limits)'): $cmd"
    return 3
  fi
  if [ "$dry" = 1 ]; then
    planned=$(( planned + t + keep ))
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

# sync_out: what this machine's session has written so far, to $OUT (the runner brings back 8 files).
sync_out() {
  [ "$dry" = 1 ] && return 0
  local f files=()
  for f in summary.md env.txt bench.log main.md sizes.md sweep.md; do
    [ -f "$results/$f" ] && cp "$results/$f" "$out/$f"
  done
  shopt -s nullglob
  (cd "$state" && files=(results runs*/logs/*/stages*.jsonl runs*/logs/*/summary*.json) \
    && tar -czf "$out/session.tar.gz" "${files[@]}" 2>/dev/null)
  [ -d "$runs/reports" ] && (cd "$runs" && tar -czf "$out/report.tar.gz" --exclude='*.pdf' reports 2>/dev/null)
  shopt -u nullglob
  return 0
}

# installed STEP: whether this machine has the bundle installed (a record an install step left in
# the state folder); says so where not.
installed() {
  [ "$dry" = 1 ] || [ -f "$state/installed" ] && return 0
  note "- $1: not run: no install on this machine ($state/installed is missing). The machine keeps the state folder only while it stays warm; it was given back (or the install never ran): run the calls again from the first (docs/gpu.md)."
  return 2
}

step_receive() {
  local dest=$state/bundle part name got=()
  shopt -s nullglob
  local parts=("$bundle"/cemlab-offline-*-of-*.tar)
  shopt -u nullglob
  if [ ${#parts[@]} = 0 ] && [ "$dry" = 0 ]; then
    note "- receive: no part (cemlab-offline-K-of-N.tar) in $bundle"; return 2
  fi
  if [ "$dry" = 0 ]; then
    mkdir -p "$dest/wheelhouse" || return 2
    cp "$bundle/install.sh" "$dest/install.sh" || { note "- receive: no install.sh in $bundle"; return 2; }
    for part in "${parts[@]}"; do cp "$part" "$dest/" || return 2; got+=("$(basename "$part")"); done
  fi
  run receive "$results/install.log" sh "$dest/install.sh" unpack || return
  [ "$dry" = 1 ] && return 0
  for name in "${got[@]}"; do   # unpacked: never again (the wheelhouse keeps its wheels)
    rm -f "$dest/$name"
    grep -qxF "$name" "$dest/received.txt" 2>/dev/null || echo "$name" >> "$dest/received.txt"
  done
  note "- receive: parts on this machine: $(sort "$dest/received.txt" | paste -sd " ")"
}

step_install() {
  local dest=$state/bundle
  if [ "$dry" = 0 ]; then   # every part K of N, before pip is asked
    local n k missing=()
    n=$(sed -n 's/^cemlab-offline-[0-9]*-of-\([0-9]*\)\.tar$/\1/p' "$dest/received.txt" 2>/dev/null | sort -u | head -1)
    if [ -z "$n" ]; then
      note "- install: no bundle part was received on this machine (no $dest/received.txt): the receive step first"
      return 2
    fi
    for k in $(seq 1 "$n"); do
      grep -qxF "cemlab-offline-$k-of-$n.tar" "$dest/received.txt" || missing+=("cemlab-offline-$k-of-$n.tar")
    done
    if [ ${#missing[@]} -gt 0 ]; then
      note "- install: not run: ${missing[*]} never reached this machine (received: $(paste -sd ' ' "$dest/received.txt")). The state folder lasts only while the machine stays warm: if the call that carried it ran, the machine was given back since; run the calls again from the first (docs/gpu.md)."
      return 2
    fi
  fi
  run install "$results/install.log" sh "$dest/install.sh" install cemlab || return
  [ "$dry" = 1 ] && return 0
  date -u '+%Y-%m-%d %H:%M UTC' > "$state/installed"
  "$py" -c "import cemlab, mlflow, ray, optuna, pydantic; print('cemlab from', cemlab.__file__)" \
    >> "$results/install.log" 2>&1 || note "- install: cemlab's imports fail here (install.log)"
  return 0
}

step_bench() {
  installed bench || return
  run bench "$results/bench.log" "${stand_in[@]}" "$py" -m cemlab.cli bench kernels --presets 86m --batch 8 \
    --seq 2048 --dtype bf16 --compile on --variants llama "cem-attn flex" "cem T2" --steps 10 --rounds 2 \
    --csv "$results/bench.csv"
}

# run_sweep STEP LABEL TABLE RUNS AXES...: one invocation of recursion_ablation at `gpu` in the runs
# folder RUNS, its stage timestamps kept apart as stages-LABEL[-K].jsonl (the next invocation would
# add to stages.jsonl); after it, even where it was stopped at its limit: the runs a stopped driver
# left running marked interrupted, the runs folder's MLflow server stopped, the tables to TABLE.md.
run_sweep() {
  local step=$1 label=$2 table=$3 dir=$4 rc=0 logs=$4/logs/recursion_ablation-gpu; shift 4
  export CEMLAB_RUNS_DIR=$dir CEMLAB_REPORTS_DIR=$dir/reports
  [ "$dry" = 1 ] || { mkdir -p "$dir"; [ -d "$dir/mlflow" ] && note "- $step: goes on in the runs folder $dir (what finished there is reused, what was stopped resumed)"; }
  keep=$reserve
  run "$step" "$results/$step.log" "${stand_in[@]}" "$py" -m cemlab.cli sweep recursion_ablation --scale gpu "$@" \
    --plain || rc=$?
  keep=0
  [ "$rc" = 3 ] && return 3   # skipped: nothing ran
  [ "$dry" = 1 ] && { note "- $step: then its tables: scripts/gpu-results.py --runs $dir > $table.md"; return 0; }
  if [ -f "$logs/stages.jsonl" ]; then
    local name=stages-$label k=2
    while [ -e "$logs/$name.jsonl" ]; do name=stages-$label-$k; k=$((k + 1)); done
    mv "$logs/stages.jsonl" "$logs/$name.jsonl"
  fi
  if [ "$rc" != 0 ]; then
    timeout -k 5 20 "${stand_in[@]}" "$py" -m cemlab.cli sweep recursion_ablation --scale gpu --mark-interrupted \
      >> "$results/$step.log" 2>&1
  fi
  timeout -k 5 10 "${stand_in[@]}" "$py" -m cemlab.cli ui --stop >> "$results/$step.log" 2>&1
  if timeout -k 5 30 "${stand_in[@]}" "$py" "$here/scripts/gpu-results.py" --runs "$dir" --sweep recursion_ablation \
      --scale gpu > "$results/$table.md.part" 2>> "$results/$step.log"; then
    mv "$results/$table.md.part" "$results/$table.md"
    note "- $step: its tables in $table.md"
  else
    rm -f "$results/$table.md.part"
    note "- $step: no tables: scripts/gpu-results.py failed ($step.log)"
  fi
  return "$rc"
}

step_main() {
  installed main || return
  [ "$dry" = 1 ] || [ -d "$runs/mlflow" ] || note "- main: a fresh runs folder, $runs (the compile cache in it cold)"
  # shellcheck disable=SC2086
  run_sweep main main main "$runs" $main_axes
}

step_sizes() {
  installed sizes || return
  # shellcheck disable=SC2086
  run_sweep sizes sizes sizes "$runs" $sizes_axes
}

step_tests() {
  installed tests || return
  run tests "$results/tests.log" "${stand_in[@]}" "$py" -m pytest -q -p no:cacheprovider -rs --durations=15 \
    tests/test_gpu_paths.py tests/test_attention_kernels.py
}

step_sweep() {
  installed sweep || return
  local rc=0
  # shellcheck disable=SC2086
  run_sweep sweep seed0 sweep "$state/runs-cache" $sweep_axes "seed=[0]" || rc=$?
  # the same shapes again: served from <runs>/compile-cache
  # shellcheck disable=SC2086
  [ "$rc" = 0 ] && { run_sweep sweep seed1 sweep "$state/runs-cache" $sweep_axes "seed=[1]" || rc=$?; }
  return "$rc"
}

steps=()
for step in "${order[@]}"; do
  for c in "${chosen[@]}"; do [ "$c" = "$step" ] && { steps+=("$step"); break; }; done
done
note ""
note "# GPU session call $(date -u '+%Y-%m-%d %H:%M:%S UTC'): ${steps[*]}; budget $budget s$([ "$dry" = 1 ] && echo ', dry run: nothing is run')"
note "state folder (kept between calls while the machine stays warm): $state"
sync_out
if [ "$dry" = 0 ] && [ ! -s "$results/env.txt" ]; then
  { nvidia-smi 2>&1; "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
    nproc; free -g; "$py" -m pip list 2>/dev/null; } > "$results/env.txt"
fi
failed=0
for step in "${steps[@]}"; do
  "step_$step" || failed=1
  sync_out
done
note "done in $(( $(date +%s) - start )) s"
sync_out
exit "$failed"
