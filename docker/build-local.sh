#!/usr/bin/env bash
# Build cemlab's image here, without Docker Hub or a Docker daemon, and run a smoke sweep in it
# against an MLflow server outside the container. What was run to check the image end to end on a
# machine with Debian's package archive and the Python package index in reach, and no GPU:
#
#   1. debootstrap a minimal Debian bookworm root file system with Python 3.11 (Debian's packages);
#   2. import it into Podman as the base image (BASE_IMAGE=localhost/cemlab-base:bookworm);
#   3. make a CPU-only variant of docker/requirements.lock (the CPU torch wheel instead of the CUDA
#      one and its nvidia-* / triton wheels; every other pin and hash unchanged) in docker/wheels/;
#   4. build docker/Dockerfile with Podman (Docker image format, which keeps the HEALTHCHECK);
#   5. start `mlflow server` on the host (127.0.0.1, a free port) and run
#      `cemlab sweep SWEEP --scale smoke` in the container (host network), then read the runs
#      back from the server outside.
#
# Needs root (or rootless Podman with subuids), podman, debootstrap, network access to the Debian
# archive and the package index, and the project's virtualenv for the host-side MLflow server.
#   sudo apt-get install podman runc debootstrap
#   docker/build-local.sh                 # WORK=/var/tmp/cemlab-image SWEEP=attention_replacement
# Environment: WORK (scratch folder), MIRROR (Debian mirror), TORCH_WHEEL (a local CPU torch
# wheel; default: downloaded from the PyTorch CPU index), SWEEP, PYTHON (host Python with mlflow),
# IMAGE (tag, default cemlab:cpu-local), SKIP_BASE=1 (reuse the imported base image).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
work="${WORK:-/var/tmp/cemlab-image}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
sweep="${SWEEP:-attention_replacement}"
image="${IMAGE:-cemlab:cpu-local}"
base="localhost/cemlab-base:bookworm"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$work"
# Containers inside a container (this machine): crun refuses its hybrid cgroup setup, so runc
# (Debian's package) runs them; and podman's default rlimits exceed what this process may set
# (no CAP_SYS_RESOURCE), so they are given within the current limits.
podman_=(podman --runtime "${OCI_RUNTIME:-runc}")
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=${NPROC:-32768}:${NPROC:-32768}")
log() { printf '\n== %s: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# 1 + 2. the base image from Debian's packages
if [ "${SKIP_BASE:-0}" != 1 ]; then
    log "debootstrap bookworm (minbase + python3, python3-venv) into $work/rootfs"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
        bookworm "$work/rootfs" "$mirror"
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    log "import the root file system as $base"
    tar -C "$work/rootfs" -c . | "${podman_[@]}" import --change 'CMD ["/bin/bash"]' - "$base"
fi
"${podman_[@]}" run --rm "${limits[@]}" "$base" python --version

# 3. the CPU-only lock and the CPU torch wheel, in the build context's docker/wheels/
log "CPU variant of docker/requirements.lock"
torch_version=$(grep -oP '^torch==\K[^ ]+' "$here/requirements.lock")
find "$here/wheels" -name '*.whl' -delete
if [ -n "${TORCH_WHEEL:-}" ]; then
    cp "$TORCH_WHEEL" "$here/wheels/"
else
    "$py" -m pip download --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
        --index-url https://download.pytorch.org/whl/cpu -d "$here/wheels" "torch==${torch_version}+cpu"
fi
wheel=$(ls "$here"/wheels/torch-*.whl)
"$py" - "$here/requirements.lock" "$wheel" "$here/wheels/requirements-cpu.lock" <<'PY'
import hashlib, re, sys
from pathlib import Path
lock, wheel, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
entries = re.findall(r"(?ms)^([A-Za-z0-9_.\-]+)==(\S+) \\\n((?:    --hash=\S+(?: \\)?\n)+)", lock.read_text())
keep = [e for e in entries if not (e[0].lower().startswith(("nvidia-", "triton", "cuda-")) or e[0].lower() == "torch")]
version = wheel.name.split("-")[1]
digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
lines = ["# CPU-only variant of docker/requirements.lock, made by docker/build-local.sh\n"]
lines += [f"{n}=={v} \\\n{h}" for n, v, h in keep] + [f"torch=={version} \\\n    --hash=sha256:{digest}\n"]
out.write_text("".join(lines))
print(f"{out}: {len(keep) + 1} packages ({len(entries) - len(keep)} CUDA-only or torch entries replaced by {wheel.name})")
PY

# 4. the image
# This machine reaches the package index through a TLS-inspecting proxy whose CA only the host
# trusts: hand the host's bundle to pip in the build (HOST_CA_BUNDLE= to skip).
ca=()
if [ -n "${HOST_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}" ]; then
    ca=(-v "${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}:/etc/ssl/certs/host-ca.crt:ro"
        --build-arg PIP_CERT=/etc/ssl/certs/host-ca.crt)
fi
log "podman build $image (BASE_IMAGE=$base)"
t0=$(date +%s)
"${podman_[@]}" build --format docker "${limits[@]}" --network host -f "$here/Dockerfile" --ignorefile "$here/Dockerfile.dockerignore" --build-arg BASE_IMAGE="$base" \
    --build-arg REQUIREMENTS=/tmp/wheels/requirements-cpu.lock "${ca[@]}" -t "$image" "$root"
t1=$(date +%s)
size=$("${podman_[@]}" image inspect --format '{{.Size}}' "$image")
log "built $image in $((t1 - t0)) s; size $((size / 1000000)) MB"
"${podman_[@]}" run --rm "${limits[@]}" "$image" python -c "import cemlab, torch, ray, mlflow, psycopg2; print('torch', torch.__version__, 'ray', ray.__version__, 'mlflow', mlflow.__version__)"

# 5. a smoke sweep in the container, against a tracking server outside it
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -rf "$work/mlflow" "$work/data" && mkdir -p "$work/mlflow/artifacts" "$work/data"
chown 1000:1000 "$work/data"   # the image's user owns what it writes to /data
log "mlflow server on 127.0.0.1:$port (outside the container)"
(cd "$work/mlflow" && exec "$py" -m mlflow server --backend-store-uri "sqlite:///$work/mlflow/mlflow.db" \
    --serve-artifacts --artifacts-destination "$work/mlflow/artifacts" --host 127.0.0.1 --port "$port" \
    --workers 1 > "$work/mlflow/server.log" 2>&1) &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
    "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && break
    sleep 1
done
log "cemlab sweep $sweep --scale smoke inside $image"
t0=$(date +%s)
"${podman_[@]}" run --rm "${limits[@]}" --network host --shm-size 2g -v "$work/data:/data" \
    -e MLFLOW_TRACKING_URI="http://127.0.0.1:$port" "$image" \
    cemlab sweep "$sweep" --scale smoke --cpus 2 --plain --no-report
t1=$(date +%s)
log "sweep done in $((t1 - t0)) s; the runs, read back outside the container:"
MLFLOW_TRACKING_URI="http://127.0.0.1:$port" "$py" - "$sweep" <<'PY'
import sys
from mlflow.tracking import MlflowClient
c = MlflowClient()
exp = c.get_experiment_by_name(f"cemlab/{sys.argv[1]}")
for r in c.search_runs([exp.experiment_id], order_by=["attributes.start_time"]):
    t = r.data.tags
    print(f"{t.get('cemlab.role', '?'):6} {t.get('cemlab.trial_id', t.get('cemlab.sweep', '')):44} {r.info.status:9} "
          f"{t.get('cemlab.status', ''):9} test/ppl={r.data.metrics.get('test/ppl', float('nan')):.2f}")
PY
