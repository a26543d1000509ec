"""``cemlab train [CONFIG.yaml] [key=value ...] [--restart]``: train one model, logged to MLflow.

Without a config file the built-in defaults are used (``configs/default.yaml`` is a tiny model on
the embedded corpus that trains in minutes on a laptop CPU: README, Timings). Overrides are dotted keys with
YAML values: ``model.attention=cem model.attn_steps=2 train.lr=1e-3``. The run logs to
``$MLFLOW_TRACKING_URI`` when set, otherwise to the project's embedded store under ``./runs``;
a store that does not answer is named before anything else happens. Flags and overrides may come
in any order.

Running the same config again never deletes anything: it continues the run from its checkpoint
(``<runs>/checkpoints/<config hash>`` or ``train.checkpoint_dir``), or reports its result when it
has one. ``--restart`` trains it anew in a new MLflow run; the old ``last.ckpt`` and ``state.json``
are moved aside into ``replaced-<time>/`` in the same folder (delete that by hand when you want).
``--dry-run`` prints the plan after checking that the data it names exists and can be read.

(What a run needs beyond the config is imported inside the functions that need it: ``cemlab
--help`` starts without the tracking store, the tasks or Lightning, ``--dry-run`` without
Lightning, and a dead tracking store is named before Lightning loads.)

Exit codes:
  0    the run finished (test metrics logged)
  1    an unexpected error (traceback printed; the MLflow run is marked failed)
  2    bad input: config, data, checkpoint folder, a checkpoint that cannot be read, or an
       unreachable tracking store (message names the key, file or URI and the fix; nothing ran)
  3    the run diverged (NaN/inf loss); the MLflow run is tagged diverged with the step
  5    no space left to write a checkpoint (message names the folder and the space needed; the
       partial file is removed); once there is room the same command resumes from the last checkpoint
  130  interrupted (Ctrl-C or SIGTERM); the same command continues from the last checkpoint
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from cemlab.config import ConfigError, config_sections, load_run_config
from cemlab.data import DataError, check_data
from cemlab.links import print_link

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_NO_SPACE = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Exit codes:", 1)[1].join(["Exit codes:", ""])
    parser.add_argument("config", nargs="?", help="run config YAML (default: built-in defaults)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.lr=1e-3")
    parser.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI or ./runs/mlflow)")
    switches = {
        "--resume": "continue the run of this config from its last checkpoint (same MLflow run); the default, "
                    "kept for scripts that pass it",
        "--restart": "train this config anew in a new MLflow run; its old checkpoint and state are moved aside "
                     "into replaced-<time>/ in the checkpoint folder, not deleted",
        "--dry-run": "print the plan (budget, steps, run name) and exit",
        "--json": "print the result as JSON on stdout",
        "--print-config": "print the resolved config (file + overrides + defaults) as YAML and exit",
    }
    for flag, text in switches.items():
        parser.add_argument(flag, action="store_true", help=text)

    parser.epilog += "\nConfig sections (KEY=VALUE overrides are SECTION.FIELD=VALUE; --print-config shows every field):\n" + \
        "".join(f"  {name:<10} {doc}\n" for name, doc in config_sections())


def run(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if isinstance(cfg, int):
        return cfg
    if getattr(args, "print_config", False):
        from cemlab.tracking.mlflow_run import config_yaml

        print(config_yaml(cfg), end="")
        return EXIT_OK

    if args.dry_run:
        return _dry_run(cfg)

    from cemlab.tracking.store import StoreError, probe_store, tracking_uri

    try:
        probe_store(args.tracking_uri or tracking_uri())
    except StoreError as e:
        print(f"cemlab train: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT

    from cemlab.lazy import frozen_imports
    from cemlab.train.checkpoint import NoSpaceError

    with frozen_imports():  # torch and Lightning, out of the collector's way (cemlab.lazy)
        from cemlab.train.run import train

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        result = train(cfg, tracking_uri=args.tracking_uri, resume=not args.restart)
    except (ConfigError, DataError) as e:
        print(f"cemlab train: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        print(f"cemlab train: {e or 'interrupted'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except NoSpaceError as e:
        print(f"cemlab train: {e}", file=sys.stderr)
        return EXIT_NO_SPACE
    return _report(result, args.json, cfg)


def _dry_run(cfg) -> int:
    """Print the plan after checking that the data it names exists and can be read."""
    from cemlab.tasks import task_of
    from cemlab.train.plan import describe

    try:
        if task_of(cfg).prepared_data:  # a task that generates its data has none to check
            check_data(cfg.data)
        print(json.dumps(describe(cfg), indent=1))
    except (ConfigError, DataError) as e:
        print(f"cemlab train: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def _load_config(args: argparse.Namespace):
    """The run config of the command line (file, overrides, defaults), or the exit code of bad input."""
    # The config file is the one positional that is not a key=value override, wherever it stands.
    positionals = ([args.config] if args.config is not None else []) + list(args.overrides)
    files = [p for p in positionals if "=" not in p or p.endswith((".yaml", ".yml"))]
    if len(files) > 1:
        print(f"cemlab train: give one config file, got {files}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = files[0] if files else None
    if config is not None:
        positionals.remove(config)
    overrides = positionals
    try:
        cfg = load_run_config(config, overrides)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"cemlab train: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT

    if args.resume and args.restart:
        print("cemlab train: --resume and --restart contradict each other; give one (resuming is the default)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    return cfg


def _report(result, as_json: bool, cfg) -> int:
    """Print the result (on stderr: one line, then the run's link; JSON on stdout with ``--json``);
    its exit code. The headline names the metrics of the run's task (``Task.test_metric``,
    ``Task.val_metric``)."""
    from cemlab.tasks import task_of
    from cemlab.tracking.conventions import runs_table_link

    if result.run_id is None:  # a DDP rank other than zero: rank zero reports
        return EXIT_DIVERGED if result.diverged else EXIT_OK
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
    if result.outcome != "trained":
        print(f"cemlab train: {result.run_name} already has a result ({result.status}, MLflow run {result.run_id}); "
              f"nothing trained, nothing deleted; --restart trains it anew (the old files are kept aside)",
              file=sys.stderr)
    m = result.metrics
    task = task_of(cfg)
    headline = " ".join(f"{k}={m[k]:.4g}" for k in (task.test_metric, task.val_metric, "train/loss") if k in m)
    size = f" ({result.params:,} parameters)" if result.params else ""
    if result.outcome == "trained":
        what = f"{result.status} after {result.steps}/{result.total_steps} steps in {result.seconds:.0f}s"
    else:  # nothing was trained: say so, never "finished"
        what = {"reused": "already in the store, not trained again",
                "recorded": "recorded from local state into the store, not trained again"}.get(result.outcome,
                                                                                             result.outcome)
    print(f"cemlab train: {result.run_name}{size}: {what}; {headline}; MLflow run {result.run_id}", file=sys.stderr)
    link = runs_table_link(result.tracking_uri or "", result.run_id)
    where = "the run in MLflow's runs table" if link != result.tracking_uri else "MLflow store"
    print_link(f"cemlab train: {where}:", link, file=sys.stderr)
    if result.diverged:
        print(f"cemlab train: diverged at step {result.diverged_step}", file=sys.stderr)
        return EXIT_DIVERGED
    return EXIT_OK
