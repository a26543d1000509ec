"""Stage 1 of a sweep, after the sweep file is expanded (every config error is raised by
``SweepSpec.expand``): what the sweep needs, checked cheapest first, before anything starts.

Before Ray starts (:func:`check_before_ray`): every data source a trial reads exists
(``cemlab.data.check_data``); the tracking store answers (``probe_store``: a bad tracking URI never
costs a Ray start-up); ``$RAY_ADDRESS``, when set, accepts a connection. Then the MLflow store the
trials will share is opened (:func:`store_starting`): ``$MLFLOW_TRACKING_URI``, or one local
``mlflow server`` on the project's sqlite store, started or reused
(``cemlab.tracking.server.starting``); trials get its URL and never open the sqlite file
(docs/tracking.md). A server that has to be started boots while the driver starts Ray (the block
of :func:`store_starting`); one that fails to start is still the error the sweep stops with.

Once Ray is up (:func:`prepare_on_ray`): resources no trial can get are refused on local Ray and
warned about on a cluster; the data is tokenised once, before any trial (trials then only map
the token store); a cluster without a shared tracking server is warned about.

``prepare_sweep_data`` is looked up in ``cemlab.sweeps.data_step`` when the data is prepared, so that a
test can substitute it there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import TYPE_CHECKING, Callable, Iterator

import ray

from cemlab.data import DataError, check_data
from cemlab.sweeps.sweepfile.files import sweeps_dir
from cemlab.sweeps.sweepfile.schema import SweepError, Trial
from cemlab.sweeps.sweepfile.load import SweepSpec
from cemlab.tasks import task_of
from cemlab.tracking.server import starting
from cemlab.tracking.store import configured_tracking_uri, probe_store

if TYPE_CHECKING:
    from rich.console import Console


def check_before_ray(spec: SweepSpec, trials: list[Trial]) -> None:
    """Data sources, the tracking store and the Ray address (module docstring). Raises
    ``SweepError`` or ``StoreError``."""
    check_data_sources(spec, trials)
    if configured_tracking_uri():
        probe_store(configured_tracking_uri())
    check_ray_address()


@contextlib.contextmanager
def store_starting() -> Iterator["OpeningStore"]:
    """The tracking store the trials share (module docstring), opened around the block:
    ``$MLFLOW_TRACKING_URI`` or a running local server is probed before the block; a local server
    that has to be started is launched before it and waited for in ``ready()`` (or at the block's
    end, ``cemlab.tracking.server.starting``). Raises ``StoreError`` or ``ServerError``."""
    uri = configured_tracking_uri()
    if uri is None:
        with starting() as server:
            if server.url is None:  # launched: it starts while the block runs
                yield OpeningStore(server.wait)
                return
            uri = server.url
    store = OpeningStore(lambda: uri)
    store.ready()
    yield store


class OpeningStore:
    """The store of :func:`store_starting`: ``ready()`` returns its URI once it answers the probe;
    ``ready_at``: when it first did (``time.time()``), or None."""

    def __init__(self, url: Callable[[], str]):
        self._url = url
        self.ready_at: float | None = None

    def ready(self) -> str:
        uri = self._url()
        if self.ready_at is None:
            probe_store(uri)
            self.ready_at = time.time()
        return uri


def prepare_on_ray(trials: list[Trial], scale: str, uri: str, cache_dir: str | None, cpus: int | None,
                   console: "Console") -> None:
    """Resources, the data and the cluster's tracking store (module docstring): a ``SweepError``,
    or warnings printed on ``console``."""
    from cemlab.sweeps.data_step import prepare_sweep_data

    warning = check_resources(trials, scale)
    if warning:
        console.print(warning, highlight=False)
    prepare_sweep_data(trials, cache_dir=cache_dir, workers=cpus, console=console)
    if os.environ.get("RAY_ADDRESS") and not os.environ.get("MLFLOW_TRACKING_URI"):
        console.print(f"warning: RAY_ADDRESS is set but MLFLOW_TRACKING_URI is not: trials on other nodes cannot "
                      f"reach the local MLflow server {uri}; set MLFLOW_TRACKING_URI to a shared server",
                      highlight=False)


RAY_HINT = ("start the Ray cluster (`ray start --head` on its head node, or `make cluster-up`), fix the address, "
             "or unset RAY_ADDRESS to run on this machine's own Ray")


def check_ray_address(timeout_s: float = 10.0) -> None:
    """A ``$RAY_ADDRESS`` (``host:port`` or ``ray://host:port``) that nothing answers is a
    ``SweepError`` naming it, within ``timeout_s``: ``ray.init`` itself waits on it for minutes with
    only its own log lines. ``auto`` and ``local`` are left to ``ray.init``."""
    address = os.environ.get("RAY_ADDRESS", "")
    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise SweepError(f"RAY_ADDRESS={address} is not an address of the form host:port (or ray://host:port); "
                         f"{RAY_HINT}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise SweepError(f"RAY_ADDRESS={address}: nothing answers at {host}:{port} ({e.strerror or e}); "
                         f"{RAY_HINT}") from None


def check_data_sources(spec: SweepSpec, trials: list[Trial]) -> None:
    """Pre-flight: every data source a trial will read exists and is readable
    (``cemlab.data.check_data``, once per distinct data config); a ``SweepError`` names the
    first trial that reads a bad one."""
    seen: set[str] = set()
    for t in trials:
        if not task_of(t.config).prepared_data:  # generated when trained
            continue
        key = t.config.data.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        try:
            check_data(t.config.data)
        except DataError as e:
            raise SweepError(f"{spec.source}: trial {t.trial_id}: {e}") from None


def check_resources(trials: list[Trial], scale: str) -> str | None:
    """Refuse, before anything runs, trials that local Ray can never place (``SweepError``); on a
    cluster (``$RAY_ADDRESS``, which may add nodes on demand) return the same finding as a warning."""
    if not trials:
        return None
    res = trials[0].resources
    where = f"{sweeps_dir() / 'scales.yaml'}: {scale}.{trials[0].task}.resources"
    total = ray.cluster_resources()
    have_cpu, have_gpu = total.get("CPU", 0), total.get("GPU", 0)
    if res.cpus > have_cpu or res.gpus > have_gpu:
        msg = (f"{where} asks {res.cpus:g} CPUs and {res.gpus:g} GPUs per trial, but this Ray cluster has "
               f"{have_cpu:g} CPUs and {have_gpu:g} GPUs; lower the resources, use another --scale, "
               f"or set RAY_ADDRESS to a cluster that has them")
        if not os.environ.get("RAY_ADDRESS"):
            raise SweepError(msg)
        return f"warning: {msg} (trials wait until the cluster has them)"
    return None
