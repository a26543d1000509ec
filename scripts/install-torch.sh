#!/usr/bin/env bash
# Install torch into a virtual environment the way this machine needs (called by `make install`).
#
#   PY=.venv/bin/python bash scripts/install-torch.sh
#
# Decision, first match wins:
#   1. torch is already installed in $PY: kept (a CUDA build on a machine without an NVIDIA GPU is
#      accepted with a warning: it runs on the CPU);
#   2. an NVIDIA GPU answers `nvidia-smi -L`: torch==$TORCH_VERSION from pip's configured index
#      (the CUDA build);
#   3. macOS: torch==$TORCH_VERSION from pip's configured index (its macOS wheels are CPU/MPS);
#   4. otherwise (a CPU-only Linux machine): the CPU build, first from what pip is configured with
#      (a local wheel folder or mirror) when that resolves to a CPU build, else from the PyTorch CPU
#      wheel index $TORCH_INDEX_URL. Never the CUDA build.
# Every pip call has a short network timeout and one retry: an index that cannot be reached fails
# within a minute with a message saying what to set, never hangs.
#
# Variables: PY (required), TORCH_VERSION (2.13.0), TORCH_INDEX_URL (the PyTorch CPU index),
# PIP_NET_TIMEOUT (seconds per connection, 15), DRY_RUN=1 (print the decision and the pip command,
# change nothing).
set -euo pipefail

PY=${PY:?set PY to the python of the virtual environment, e.g. PY=.venv/bin/python}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
PIP_NET_TIMEOUT=${PIP_NET_TIMEOUT:-15}
DRY_RUN=${DRY_RUN:-0}
NET=(--timeout "$PIP_NET_TIMEOUT" --retries 1)
PIN="torch==$TORCH_VERSION"

say() { echo "install-torch: $*"; }
warn() { echo "install-torch: warning: $*" >&2; }

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# "VERSION CUDA" of the torch in $PY ("cpu" for a CPU build), empty when none is installed.
installed_torch() { "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda or "cpu")' 2>/dev/null || true; }

pip_install() {
    if [[ $DRY_RUN == 1 ]]; then
        echo "would run: $PY -m pip install $*"
        return 0
    fi
    "$PY" -m pip install -q "$@"
}

check_result() {  # after an install: say what is there, warn about a CUDA build without a GPU
    [[ $DRY_RUN == 1 ]] && return 0
    local got
    got=$(installed_torch)
    if [[ -z $got ]]; then
        echo "install-torch: torch was installed but \`$PY -c 'import torch'\` fails" >&2
        exit 1
    fi
    read -r version cuda <<<"$got"
    say "torch $version ($([[ $cuda == cpu ]] && echo "CPU build" || echo "CUDA $cuda build")) installed"
    if [[ $cuda != cpu ]] && ! has_gpu; then
        warn "torch $version is a CUDA build on a machine without an NVIDIA GPU; it runs on the CPU"
    fi
}

# 1. Already installed: keep it.
current=$(installed_torch)
if [[ -n $current ]]; then
    read -r version cuda <<<"$current"
    if [[ $cuda != cpu ]] && ! has_gpu; then
        warn "the installed torch $version is a CUDA $cuda build and this machine has no NVIDIA GPU: it is kept and runs on the CPU; for the smaller CPU build: $PY -m pip uninstall -y torch && make install"
    fi
    if [[ ${version%%+*} != "$TORCH_VERSION" ]]; then
        warn "torch $version is installed; cemlab is tested with $TORCH_VERSION (kept)"
    fi
    say "torch $version ($([[ $cuda == cpu ]] && echo "CPU build" || echo "CUDA $cuda build")) already installed: kept"
    exit 0
fi

fail_index() {
    echo "install-torch: could not install $PIN from TORCH_INDEX_URL=$TORCH_INDEX_URL (unreachable, or no such wheel there; see pip's message above)." >&2
    echo "install-torch: set TORCH_INDEX_URL to a reachable mirror of the PyTorch CPU wheels (make install TORCH_INDEX_URL=...), or install a CPU torch into the virtual environment yourself first: an installed torch is kept." >&2
    exit 1
}

os=$(uname -s)
# 2. A GPU: the CUDA build from pip's configured index.
if [[ $os == Linux ]] && has_gpu; then
    say "NVIDIA GPU found: $PIN (CUDA build) from pip's configured index"
    pip_install "${NET[@]}" "$PIN" || { echo "install-torch: pip could not install $PIN (see above); check pip's index or network" >&2; exit 1; }
    check_result
    exit 0
fi
# 3. macOS: the only build there is.
if [[ $os == Darwin ]]; then
    say "macOS: $PIN from pip's configured index (CPU and MPS build)"
    pip_install "${NET[@]}" "$PIN" || { echo "install-torch: pip could not install $PIN (see above); check pip's index or network" >&2; exit 1; }
    check_result
    exit 0
fi

# 4. CPU-only Linux: a CPU build that pip's configuration already offers, else the CPU index.
say "no NVIDIA GPU: installing the CPU build of $PIN"
if [[ $DRY_RUN == 1 ]]; then
    echo "would try: $PY -m pip install ${NET[*]} $PIN  (only when pip's configured sources resolve it to a CPU build)"
    pip_install "${NET[@]}" --index-url "$TORCH_INDEX_URL" "$PIN"
    exit 0
fi
report=$(mktemp)
trap 'rm -f "$report"' EXIT
# What would pip pick with its own configuration (a local wheel folder, a mirror)? Resolving reads
# metadata only. A CUDA build pulls nvidia-* packages or carries a +cuXXX version.
if "$PY" -m pip install -q --dry-run --ignore-installed --report "$report" "${NET[@]}" "$PIN" >/dev/null 2>&1 &&
    "$PY" - "$report" <<'EOF'
import json, sys
items = json.load(open(sys.argv[1])).get("install", [])
names = [i["metadata"]["name"].lower() for i in items]
torch = [i["metadata"]["version"] for i in items if i["metadata"]["name"].lower() == "torch"]
cuda = any(n.startswith("nvidia-") for n in names) or any("+cu" in v for v in torch)
sys.exit(1 if cuda or not torch else 0)
EOF
then
    say "pip's configured sources offer a CPU build: using it"
    pip_install "${NET[@]}" "$PIN" || fail_index
else
    say "pip's configured sources offer no CPU build: using the PyTorch CPU index $TORCH_INDEX_URL"
    pip_install "${NET[@]}" --index-url "$TORCH_INDEX_URL" "$PIN" || fail_index
fi
check_result
