"""``cemlab slurm SWEEP --scale S --nodes N --mlflow URL``: write the sbatch script that runs the
sweep on a SLURM allocation (Ray across the nodes, data prepared first, requeue resumes).

See :mod:`cemlab.sweeps.slurm`. Submit the result with ``sbatch``. The job's log folder
``<runs-dir>/slurm`` is created here (SLURM opens the log before the script runs). Exit code 2 for a bad sweep,
scale or setting (checked here, not after a day in the queue).

The sweep files and the sbatch template are imported inside ``run``, so ``cemlab --help``, which
imports every command's ``cli`` module, does not load them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from cemlab.links import COMMAND, PATH, print_link


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="sweep name (a file in sweeps/) or path to a sweep file")
    parser.add_argument("--scale", default="paper", help="scale (default paper)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes of the allocation (default 1)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--cpus-per-node", type=int, default=32, help="CPUs per node for Ray (default 32)")
    parser.add_argument("--mlflow", default=os.environ.get("MLFLOW_TRACKING_URI"),
                        help="tracking server URL every node reaches (default $MLFLOW_TRACKING_URI)")
    parser.add_argument("--runs-dir", default=os.environ.get("CEMLAB_RUNS_DIR"),
                        help="runs folder on storage every node sees (default $CEMLAB_RUNS_DIR)")
    parser.add_argument("--time", default="24:00:00", help="time limit per job (default 24:00:00); requeued jobs resume")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument("--apptainer", default=None, metavar="IMAGE.sif", help="run inside this Apptainer image")
    parser.add_argument("--enroot", default=None, metavar="IMAGE", help="run inside this image with pyxis/Enroot")
    parser.add_argument("-o", "--output", default=None, help="write the script here (default: print it)")


def run(args: argparse.Namespace) -> int:
    from cemlab.sweeps.slurm import SlurmJob, render
    from cemlab.sweeps.sweepfile.load import SweepError, load_sweep

    if not args.mlflow:
        print("cemlab slurm: --mlflow is not set (nor MLFLOW_TRACKING_URI): give the URL of a tracking server "
              "every node reaches", file=sys.stderr)
        return 2
    if not args.runs_dir:
        print("cemlab slurm: --runs-dir is not set (nor CEMLAB_RUNS_DIR): give a folder on shared storage",
              file=sys.stderr)
        return 2
    try:
        trials = load_sweep(args.sweep).expand(args.scale)
        job = SlurmJob(sweep=args.sweep, scale=args.scale, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                       cpus_per_node=args.cpus_per_node, mlflow=args.mlflow, runs_dir=str(Path(args.runs_dir)),
                       time=args.time, partition=args.partition, account=args.account, apptainer=args.apptainer,
                       enroot=args.enroot)
        need = max((t.resources.workers * t.resources.gpus_per_worker for t in trials), default=0)
        if need > job.nodes * job.gpus_per_node:
            raise ValueError(f"--nodes={job.nodes} x --gpus-per-node={job.gpus_per_node}: a trial of {args.sweep} at "
                             f"scale {args.scale} needs {need:g} GPUs; ask for more nodes or GPUs")
        text = render(job)
        log_dir = Path(job.runs_dir) / "slurm"
        try:  # SLURM opens the job's log before the script runs: a missing folder kills the job silently
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"--runs-dir={job.runs_dir}: cannot create the job's log folder {log_dir} "
                             f"({e.strerror or e}); give a folder on shared storage you can write") from None
    except (SweepError, ValueError) as e:
        print(f"cemlab slurm: {e}", file=sys.stderr)
        return 2
    for note in job.notes():
        print(f"cemlab slurm: note: {note}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(text)
        os.chmod(args.output, 0o755)
        print_link(f"wrote {len(trials)} trials' job script:", args.output, PATH)
        print_link("  the job logs to:", log_dir, PATH)
        print_link("  submit it with:", shlex.join(["sbatch", str(args.output)]), COMMAND)
    else:
        sys.stdout.write(text)
    return 0
