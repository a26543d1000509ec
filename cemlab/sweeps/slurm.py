"""``cemlab slurm SWEEP --scale S --nodes N ...``: an sbatch script that runs a sweep on a SLURM allocation.

The script (printed, or written with ``--output``):

1. prepares the sweep's data on the first node's CPUs (``cemlab data prepare``) while Ray is not
   yet holding the GPUs; it resumes a store a preempted job left half done;
2. starts the job's own Ray across the allocation, the head on the first node (``ray start
   --head`` there, ``ray start --address`` on the others, one ``srun`` task per node): in a
   temporary folder of its own per job (``/tmp/cemlab-ray-<job id>``) and on ports found free
   on each node when the job starts, so another Ray on a node (another user's, or one a job
   left behind) is neither joined nor stopped; only the processes of the job's folder are ended
   when the job ends, or when a requeued run of the same job starts. Ray's ``ray symmetric-run``
   is not used: it refuses to start when any Ray runs on the node and stops every Ray of the
   user at its end (docs/cluster.md). Ray's token authentication is on, with a random token per
   job that only the job's environment holds;
3. runs ``cemlab sweep`` against the MLflow server given (``--mlflow``, reachable from every node;
   credentials come from the job's environment: ``MLFLOW_TRACKING_USERNAME`` /
   ``MLFLOW_TRACKING_PASSWORD``, never from the script);
4. on preemption (SIGTERM) or when the time limit nears (``--signal=B:USR1@300``) stops the sweep
   cleanly (its runs are marked interrupted: by the driver, or after it by ``cemlab sweep
   --mark-interrupted`` where SLURM's SIGTERM ended the job's Ray and Ray ended the driver before
   it could, or where its stop outlasts ``CEMLAB_DRIVER_STOP_S``, SLURM's KillWait less 20 s, and
   the script kills it) and requeues the job; the requeued job runs the same
   script, and ``cemlab sweep`` resumes: finished trials are found in MLflow, the others continue
   from their checkpoints.

Optionally everything runs inside a container: ``--apptainer IMAGE.sif`` (``apptainer exec
--nv``, the runs folder bound at the same path) or ``--enroot IMAGE`` (pyxis's ``srun
--container-image``). The Ray dashboard listens on the head's loopback only.

The script's Ray part is a set of bash functions (``ray_node``, ``wait_for_nodes``,
``run_sweep``); sourcing the script defines them without running anything, which is how the
tests run it with two local "nodes".
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass
class SlurmJob:
    sweep: str
    scale: str
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    mlflow: str
    runs_dir: str
    time: str = "24:00:00"
    partition: str | None = None
    account: str | None = None
    apptainer: str | None = None
    enroot: str | None = None
    ray_port: int = 0  # 0: a free port on the head, found when the job starts
    extra_sweep_args: str = ""

    def check(self) -> None:
        """Bad settings are named before a job waits in a queue for a day."""
        if self.nodes < 1:
            raise ValueError(f"--nodes={self.nodes}: give 1 or more")
        if self.gpus_per_node < 0 or self.cpus_per_node < 1:
            raise ValueError("--gpus-per-node must be >= 0 and --cpus-per-node >= 1")
        if not self.mlflow.startswith(("http://", "https://")):
            raise ValueError(f"--mlflow={self.mlflow!r}: give the URL of a tracking server every node reaches "
                             f"(http://HOST:PORT); a local store is not shared between nodes")
        if self.loopback_mlflow() and self.nodes > 1:
            raise ValueError(f"--mlflow={self.mlflow!r} is a loopback address: the other nodes cannot reach it; "
                             f"give the server's cluster address (a loopback address works with --nodes 1 only)")
        if self.apptainer and self.enroot:
            raise ValueError("--apptainer and --enroot: give one container runtime, not both")
        if not self.runs_dir.startswith("/"):
            raise ValueError(f"--runs-dir={self.runs_dir!r}: give an absolute path on storage every node sees")
        if any(c.isspace() for c in self.runs_dir):
            raise ValueError(f"--runs-dir={self.runs_dir!r}: give a path without spaces (the job log's #SBATCH "
                             f"--output line cannot quote one)")

    def loopback_mlflow(self) -> bool:
        """Whether ``mlflow`` names this machine's loopback (reachable from the first node only)."""
        host = urlparse(self.mlflow).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def notes(self) -> list[str]:
        """What is allowed but worth knowing (printed by ``cemlab slurm``)."""
        if self.loopback_mlflow():
            return [f"--mlflow={self.mlflow} is a loopback address: valid for a one-node job only, whose trials "
                    f"all run on the node that runs the server"]
        return []


TEMPLATE = r"""#!/bin/bash
# cemlab sweep {sweep} at scale {scale} on {nodes} node(s) x {gpus} GPU(s): generated by `cemlab slurm`.
#SBATCH --job-name=cemlab-{sweep}-{scale}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={cpus}
{gpu_line}#SBATCH --exclusive
#SBATCH --time={time}
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
#SBATCH --open-mode=append
#SBATCH --output={runs_dir}/slurm/%x-%j.out
{extra_lines}
# MLflow credentials, if the server asks for them, come from the submitting environment
# (export MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD before sbatch), not from this file.
# The tracking server and the runs folder are the ones `cemlab slurm` was given, whatever the
# submitting shell exports (sbatch hands the job that shell's environment).
export MLFLOW_TRACKING_URI={mlflow_q}
export CEMLAB_RUNS_DIR={runs_dir_q}
export RAY_PORT="${{RAY_PORT:-{ray_port}}}"  # 0: a free port on the head, per job
export CEMLAB_NODES="${{CEMLAB_NODES:-{nodes}}}"
export CEMLAB_CPUS="${{CEMLAB_CPUS:-{cpus}}}"
export CEMLAB_GPUS="${{CEMLAB_GPUS:-{gpus}}}"
# Command prefixes that run a program in the image (empty: the nodes' own Python environment):
# CEMLAB_RUN for the batch script's own commands on the head, CEMLAB_NODE_RUN inside srun steps,
# CEMLAB_SRUN_CONTAINER the srun options that put a step in the image (pyxis / Enroot).
export CEMLAB_RUN="${{CEMLAB_RUN-{run_prefix}}}"
export CEMLAB_NODE_RUN="${{CEMLAB_NODE_RUN-{node_run_prefix}}}"
export CEMLAB_SRUN_CONTAINER="${{CEMLAB_SRUN_CONTAINER-{srun_container}}}"
SWEEP_ARGS=({sweep_args})
# Ray's token authentication: nodes and drivers must present the job's token (main makes a
# random one per job; it lives in the job's environment, never in a file).
export RAY_AUTH_MODE="${{RAY_AUTH_MODE:-token}}"
# The job's own Ray: a temporary folder per job on every node (short: Ray's socket paths are
# limited to 107 characters), so another Ray on the node is neither joined nor stopped.
export CEMLAB_RAY_TMP="${{CEMLAB_RAY_TMP:-/tmp/cemlab-ray-${{SLURM_JOB_ID:-$$}}}}"

free_ports() {{
    # $1 TCP ports that nothing on this node listens on now
    $CEMLAB_NODE_RUN python -c "import socket,sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(('', 0))
print(' '.join(str(s.getsockname()[1]) for s in socks))" "$1"
}}

stop_job_ray() {{
    # Ends this job's Ray processes on this node (found by the job's temporary folder in their
    # command line), left by this run or by a run before a requeue; no other Ray is touched.
    pkill -TERM -f -- "$CEMLAB_RAY_TMP/" 2>/dev/null || return 0
    local _
    for _ in $(seq 1 20); do pgrep -f -- "$CEMLAB_RAY_TMP/" >/dev/null || return 0; sleep 0.5; done
    pkill -KILL -f -- "$CEMLAB_RAY_TMP/" 2>/dev/null
    return 0
}}

ray_node() {{
    # One Ray node per task: the head on node 0, the others join it. Runs until the job ends.
    local rank="${{SLURM_NODEID:-${{1:-0}}}}"
    stop_job_ray
    mkdir -p "$CEMLAB_RAY_TMP"
    local p
    read -ra p < <(free_ports 7)
    # CEMLAB_RAY_START_ARGS: more `ray start` options, e.g. --object-store-memory
    # shellcheck disable=SC2206
    local common=(--temp-dir="$CEMLAB_RAY_TMP/" --num-cpus="$CEMLAB_CPUS" --num-gpus="$CEMLAB_GPUS" --block
                  --disable-usage-stats --node-manager-port="${{p[0]}}" --object-manager-port="${{p[1]}}"
                  --dashboard-agent-listen-port="${{p[2]}}" --dashboard-agent-grpc-port="${{p[3]}}"
                  --metrics-export-port="${{p[4]}}" --runtime-env-agent-port="${{p[5]}}" ${{CEMLAB_RAY_START_ARGS:-}})
    if [ "$rank" = 0 ]; then
        local dashboard="${{CEMLAB_DASHBOARD:-}}"  # default: when Ray's dashboard packages (ray[default]) are there
        [ -n "$dashboard" ] || dashboard=$($CEMLAB_NODE_RUN python -c "from ray._private.utils import \
get_dashboard_dependency_error as missing; print('false' if missing() else 'true')" 2>/dev/null || echo false)
        $CEMLAB_NODE_RUN ray start --head --node-ip-address="$HEAD_IP" --port="$RAY_PORT" \
            --dashboard-host=127.0.0.1 --dashboard-port="${{p[6]}}" \
            --include-dashboard="$dashboard" "${{common[@]}}" &
    else
        local _
        for _ in $(seq 1 60); do  # the head's GCS first
            $CEMLAB_NODE_RUN python -c "import socket,sys; socket.create_connection(('$HEAD_IP', $RAY_PORT), 2)" 2>/dev/null && break
            sleep 2
        done
        $CEMLAB_NODE_RUN ray start --address="$HEAD_IP:$RAY_PORT" ${{NODE_IP:+--node-ip-address="$NODE_IP"}} "${{common[@]}}" &
    fi
    local ray_pid=$!
    trap 'kill -TERM "$ray_pid" 2>/dev/null' TERM INT
    wait "$ray_pid"; wait "$ray_pid" 2>/dev/null
    stop_job_ray
    rm -rf "$CEMLAB_RAY_TMP"  # the sweep's own logs are in the runs folder
}}

wait_for_nodes() {{
    # Until the cluster has $CEMLAB_NODES alive nodes (or fail after ${{1:-300}} s).
    RAY_ADDRESS="$HEAD_IP:$RAY_PORT" timeout "${{1:-300}}" $CEMLAB_RUN python - <<'PY'
import os, time
import ray
ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
want = int(os.environ["CEMLAB_NODES"])
while sum(n["Alive"] for n in ray.nodes()) < want:
    time.sleep(1)
print(f"ray: {{want}} node(s) up")
PY
}}

run_sweep() {{
    # The sweep driver on the head; SIGTERM / USR1 stop it cleanly (runs marked interrupted).
    RAY_ADDRESS="$HEAD_IP:$RAY_PORT" $CEMLAB_RUN cemlab sweep "${{SWEEP_ARGS[@]}}" &
    DRIVER=$!
    while kill -0 "$DRIVER" 2>/dev/null; do
        if [ -z "$STOPPED_BY" ]; then
            wait "$DRIVER"  # until it ends or a trap wakes it
        elif [ $((SECONDS - STOP_AT)) -ge "$CEMLAB_DRIVER_STOP_S" ]; then
            # its clean stop is stuck (a shutdown waiting on Ray's head, gone with the SIGTERM): kill it,
            # so that main still marks what it left running before SLURM's SIGKILL ends the job
            echo "cemlab: $(date +%T) the driver did not end within $CEMLAB_DRIVER_STOP_S s of the $STOPPED_BY;" \
                 "killing it" >&2
            kill -KILL "$DRIVER" 2>/dev/null
        else
            sleep 1
        fi
    done
    wait "$DRIVER"  # its exit status
}}

stop_sweep() {{
    # SIGTERM (preemption, scancel, scontrol requeue) or USR1 (the time limit nears): the driver
    # marks its runs interrupted; main requeues the job after a USR1 (SLURM does after a SIGTERM).
    # SLURM sends SIGTERM to every process of the job itself, the driver too: a second one would
    # interrupt its clean stop; USR1 reaches the batch script only and is passed on.
    echo "cemlab: $(date +%T) $1: stopping the sweep; the requeued job resumes it" >&2
    STOPPED_BY="$1"
    STOP_AT=$SECONDS
    [ "$1" = USR1 ] && [ -n "${{DRIVER:-}}" ] && kill -TERM "$DRIVER" 2>/dev/null
}}

main() {{
    set -uo pipefail
    mkdir -p "$CEMLAB_RUNS_DIR/slurm"
    if [ -z "${{RAY_AUTH_TOKEN:-}}" ]; then
        RAY_AUTH_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    fi
    export RAY_AUTH_TOKEN
    STOPPED_BY=""
    STOP_AT=0
    # After a SIGTERM the driver gets SLURM's KillWait less 20 s (at least 20 s) to stop cleanly; the
    # rest is for marking here what it left running before SLURM's SIGKILL
    if ! [[ "${{CEMLAB_DRIVER_STOP_S:-}}" =~ ^[0-9]+$ ]]; then
        [ -n "${{CEMLAB_DRIVER_STOP_S:-}}" ] && echo "cemlab: CEMLAB_DRIVER_STOP_S=$CEMLAB_DRIVER_STOP_S is not" \
            "a whole number of seconds; the driver gets KillWait less 20 s (export a number to set it)" >&2
        local kill_wait
        kill_wait=$(scontrol show config 2>/dev/null | awk '$1 == "KillWait" {{print $3}}')
        [[ "$kill_wait" =~ ^[0-9]+$ ]] || kill_wait=30
        CEMLAB_DRIVER_STOP_S=$(( kill_wait > 40 ? kill_wait - 20 : 20 ))
    fi
    trap 'stop_sweep TERM' TERM
    trap 'stop_sweep USR1' USR1
    local nodes
    mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    HEAD_IP=$(srun --nodes=1 --ntasks=1 -w "${{nodes[0]}}" hostname --ip-address | awk '{{print $1}}')
    export HEAD_IP
    # this batch script runs on the first node, the head: a free port there for the job's GCS
    [ "$RAY_PORT" = 0 ] && RAY_PORT=$(free_ports 1)
    echo "cemlab: job $SLURM_JOB_ID (restart ${{SLURM_RESTART_COUNT:-0}}) on ${{nodes[*]}}; head $HEAD_IP:$RAY_PORT;" \
         "Ray's folder $CEMLAB_RAY_TMP; runs $CEMLAB_RUNS_DIR; tracking $MLFLOW_TRACKING_URI"
    # 1. the data, once, on the CPUs, before Ray holds the GPUs (resumes a half-done store)
    echo "cemlab: data step"
    $CEMLAB_RUN cemlab data prepare {sweep_q} --scale {scale_q} --workers "$CEMLAB_CPUS" || exit 2
    # 2. the job's own Ray across the allocation (its folder and ports), 3. the sweep on the head
    srun --nodes="$CEMLAB_NODES" --ntasks-per-node=1 --overlap $CEMLAB_SRUN_CONTAINER \
        bash -c "$(declare -f free_ports stop_job_ray ray_node); ray_node" &
    local ray_step=$!
    wait_for_nodes 600 &
    local waiter=$!
    while kill -0 "$waiter" 2>/dev/null && kill -0 "$ray_step" 2>/dev/null; do sleep 1; done
    if ! kill -0 "$ray_step" 2>/dev/null || ! wait "$waiter"; then  # Ray's step ended, or no nodes in time
        echo "cemlab: Ray did not come up on $CEMLAB_NODES node(s) (its output is above)" >&2
        kill "$waiter" "$ray_step" 2>/dev/null; stop_job_ray; exit 2
    fi
    local rc=0
    [ -z "$STOPPED_BY" ] && {{ run_sweep; rc=$?; }}
    stop_job_ray  # the head's Ray processes directly (`ray start` alone drains for 30 s first)
    kill -TERM "$ray_step" 2>/dev/null
    # SLURM's SIGTERM reaches the job's Ray with the driver, and Ray ends a driver whose raylet is
    # gone, maybe before it marked its runs: whatever it left running is marked interrupted here,
    # before waiting on the Ray step (its srun may wait up to KillWait for the step to end)
    [ -n "$STOPPED_BY" ] && echo "cemlab: $(date +%T) the driver has ended; marking what it left running" >&2 \
        && $CEMLAB_RUN cemlab sweep "${{SWEEP_ARGS[@]}}" --mark-interrupted
    wait "$ray_step" 2>/dev/null
    [ "$STOPPED_BY" = USR1 ] && scontrol requeue "$SLURM_JOB_ID"  # the time limit: requeue ourselves
    exit "$rc"
}}

if [ "${{BASH_SOURCE[0]}}" = "$0" ]; then
    main "$@"
fi
"""


def render(job: SlurmJob) -> str:
    """The sbatch script of ``job`` (checked first; see the module docstring)."""
    job.check()
    extra = []
    if job.partition:
        extra.append(f"#SBATCH --partition={job.partition}")
    if job.account:
        extra.append(f"#SBATCH --account={job.account}")
    run_prefix = node_run_prefix = srun_container = ""
    if job.apptainer:
        run_prefix = node_run_prefix = f"apptainer exec --nv --bind {job.runs_dir} {job.apptainer}"
    if job.enroot:
        srun_container = f"--container-image={job.enroot} --container-mounts={job.runs_dir}:{job.runs_dir}"
        run_prefix = f"srun --overlap --nodes=1 --ntasks=1 {srun_container}"
    sweep_args = [job.sweep, "--scale", job.scale, "--plain", *shlex.split(job.extra_sweep_args)]
    return TEMPLATE.format(
        sweep=job.sweep, scale=job.scale, nodes=job.nodes, cpus=job.cpus_per_node, gpus=job.gpus_per_node,
        gpu_line=f"#SBATCH --gpus-per-node={job.gpus_per_node}\n" if job.gpus_per_node else "",
        time=job.time, runs_dir=job.runs_dir, runs_dir_q=shlex.quote(job.runs_dir), extra_lines="\n".join(extra),
        mlflow_q=shlex.quote(job.mlflow), ray_port=job.ray_port, run_prefix=run_prefix, node_run_prefix=node_run_prefix,
        srun_container=srun_container, sweep_args=" ".join(shlex.quote(a) for a in sweep_args), sweep_q=shlex.quote(job.sweep),
        scale_q=shlex.quote(job.scale),
    )
