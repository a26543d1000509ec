"""The MLflow store cemlab writes to, and finding runs in it by config hash.

Where: ``$MLFLOW_TRACKING_URI`` when set (a remote ``http://`` server or a database), otherwise
the project's embedded store, an absolute ``sqlite:///<runs>/mlflow/mlflow.db`` with artifacts in
``<runs>/mlflow/artifacts`` (MLflow 3 refuses a ``./mlruns`` file store, and Ray trials change
directory, so the path is absolute).

Concurrency: several processes opening one *fresh* sqlite store at once race on its schema
migration (MLflow creates and upgrades the tables when it opens the store). :func:`get_client`
therefore opens a sqlite store for the first time in a process under a file lock beside the
database (``mlflow.db.lock``): the first process creates and migrates it, the others wait and
then find it ready. A sweep still hands its trials one local server's URL
(``cemlab.tracking.server``), never the sqlite path.

Remote stores: MLflow retries a failing HTTP call for about four minutes by default. cemlab's
calls use short settings instead (:data:`HTTP_SETTINGS`, see docs/tracking.md), so a server that
went away is named within seconds; a variable already set in the environment wins.

Reachability: :func:`probe_store` names a store that does not answer (server, database or sqlite
folder) within seconds; every command that needs the store calls it first.

Reuse: every trial run carries the tag ``cemlab.config_hash``; :func:`find_runs_by_hash` finds
the runs of given hashes in all experiments, :func:`finished_run_for` the one to reuse.

MLflow (with filelock, for the sqlite store) is imported inside the functions that use it: importing
MLflow takes seconds, and ``cemlab plan --no-store`` never needs it.
"""

from __future__ import annotations

import base64
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from cemlab.paths import mlflow_dir
from cemlab.tracking import outcomes, schema

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

#: Above this many hashes, one scan of all tagged runs is cheaper than one query per hash
#: (MLflow's search grammar has no IN for tags).
SCAN_THRESHOLD = 16



#: MLflow's own HTTP retry settings for cemlab's calls (``os.environ.setdefault``: a user's value
#: wins). A refused connection fails after about 3 s (retries after 0 s and 2 s, plus jitter);
#: a server that accepts but never answers after about 3 x 5 s + 3 s = 18 s. Both are under the
#: 30 s within which a sweep must name a store that went away.
HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}
#: Usage telemetry of MLflow and Ray, off in cemlab's processes (and the Ray and MLflow processes
#: they start) unless ``CEMLAB_TELEMETRY=1``: a researcher's runs should not phone home unasked,
#: and MLflow's telemetry thread changes the environment while other threads read it.
TELEMETRY_OFF = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "RAY_USAGE_STATS_ENABLED": "0"}
#: MLflow prints "View run ... at: URL" / "View experiment at: URL" on stdout when a run on a server
#: ends; its experiment link opens MLflow 3's GenAI overview, not the runs. cemlab prints its own
#: links (to the runs table or the sweep's parent run, ``cemlab.tracking.conventions``) instead.
QUIET_URLS = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
#: Set to 1 to leave MLflow's and Ray's telemetry as their defaults.
TELEMETRY_OPT_IN = "CEMLAB_TELEMETRY"
#: Lock file beside a sqlite database, held while a process opens (creates, migrates) it.
SQLITE_LOCK_SUFFIX = ".lock"


def configure_http() -> dict[str, str]:
    """Set :data:`HTTP_SETTINGS` in this process's environment (unless already set); returns the
    values in force. Trials get them through their environment too (``TrialJob.env``)."""
    for k, v in HTTP_SETTINGS.items():
        os.environ.setdefault(k, v)
    return {**{k: os.environ[k] for k in HTTP_SETTINGS}, **telemetry_off()}


def telemetry_off() -> dict[str, str]:
    """Turn MLflow's and Ray's usage telemetry off in this process's environment (inherited by the
    processes it starts), unless the user opted in (:data:`TELEMETRY_OPT_IN`) or set them
    already; returns the values in force."""
    if os.environ.get(TELEMETRY_OPT_IN, "").strip().lower() in ("1", "true", "yes"):
        return {}
    for k, v in TELEMETRY_OFF.items():
        os.environ.setdefault(k, v)
    return {k: os.environ[k] for k in TELEMETRY_OFF}


def default_tracking_uri() -> str:
    """The project's embedded store: ``sqlite:///<runs>/mlflow/mlflow.db`` (absolute)."""
    return f"sqlite:///{(mlflow_dir() / 'mlflow.db').as_posix()}"


def configured_tracking_uri() -> str | None:
    """``$MLFLOW_TRACKING_URI`` when set (a store the user chose), else None."""
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def tracking_uri() -> str:
    """The store every command uses: :func:`configured_tracking_uri`, else :func:`default_tracking_uri`.
    (A sweep hands its trials a server's URL instead of the sqlite file:
    ``cemlab.tracking.server.shared_tracking_uri``.)"""
    return configured_tracking_uri() or default_tracking_uri()


def artifact_root() -> Path:
    """Folder of the embedded store's artifacts: ``<runs>/mlflow/artifacts``."""
    p = mlflow_dir() / "artifacts"
    p.mkdir(parents=True, exist_ok=True)
    return p


def is_local_sqlite(uri: str) -> bool:
    return uri.startswith("sqlite:")


def store_exists(uri: str | None = None) -> bool:
    """False only for a sqlite store whose file does not exist yet (nothing to read there)."""
    uri = uri or tracking_uri()
    if not is_local_sqlite(uri):
        return True
    return Path(uri.removeprefix("sqlite:///")).is_file()


class StoreError(RuntimeError):
    """The MLflow store cannot be reached; the message says which one and what to do."""


def healthy(url: str, timeout: float = 2.0) -> bool:
    """True when an MLflow server answers ``GET <url>/health`` with 200."""
    return _http_problem(url, timeout) is None


def check_reachable(uri: str | None = None) -> None:
    """Fail fast (instead of MLflow's minutes of HTTP retries) when ``uri`` cannot be reached:
    :func:`probe_store` with a 5 s timeout."""
    probe_store(uri or tracking_uri(), timeout_s=5.0)


#: Default ports of the database URIs MLflow takes (``scheme+driver://user@host[:port]/db``).
_DB_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}


def probe_store(uri: str, timeout_s: float = 10.0) -> None:
    """Raise :class:`StoreError` within about ``timeout_s`` when the tracking store ``uri`` cannot
    be reached; the message names the URI and how to get a store.

    MLflow's own client retries an unreachable server for minutes, so every command that needs
    the store calls this first. A server (``http(s)://``) must answer ``GET /health`` and then one
    real API call, as cemlab's client makes it (its host name, its credentials): a server that
    refuses the host header (MLflow's ``--allowed-hosts``) or wants credentials is named here, not
    by a trial's traceback after Ray started. A database
    URI must accept a TCP connection on its host and port; a sqlite file needs an existing folder
    (the file itself is created on first use)."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    reason = None
    if scheme in ("http", "https"):
        reason = _http_problem(uri, timeout_s)
        refused = _api_refusal(uri, timeout_s) if reason is None else None
        if refused:
            raise StoreError(refused)
        what = "the MLflow server at"
    elif scheme in _DB_PORTS:
        reason = _tcp_problem(uri, _DB_PORTS[scheme], timeout_s)
        what = "the tracking database at"
    elif scheme == "sqlite":
        path = uri.removeprefix("sqlite:///").split("?", 1)[0]   # as store_exists reads it
        folder = Path(path).parent if path not in ("", ":memory:") and uri.startswith("sqlite:///") else None
        if folder is not None and not folder.is_dir():
            reason = f"its folder {folder} does not exist"
        what = "the sqlite store"
    if reason is None:
        return
    raise StoreError(
        f"{what} {uri} does not answer ({reason}). Start a server: `cemlab ui` (or `make ui`) serves the "
        f"project's store and prints its address to put in MLFLOW_TRACKING_URI; or start the server that "
        f"MLFLOW_TRACKING_URI names; or unset MLFLOW_TRACKING_URI to use the embedded default store under ./runs")


def _http_problem(url: str, timeout_s: float) -> str | None:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout_s) as r:
            return None if r.status == 200 else f"GET /health answered {r.status}"
    except urllib.error.HTTPError as e:
        return f"GET /health answered {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"GET /health: {getattr(e, 'reason', None) or e}"


#: The API call of the pre-flight: cheap, read-only, allowed to every user that may read.
_API_PROBE = "/api/2.0/mlflow/experiments/search?max_results=1"
_CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def _api_refusal(url: str, timeout_s: float) -> str | None:
    """Why the server at ``url`` refuses an API call made with the environment's credentials (the
    message and its fix), or None when it answers it."""
    request = urllib.request.Request(f"{url.rstrip('/')}{_API_PROBE}")
    user, password = (os.environ.get(k) for k in _CREDENTIALS)
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if user and password:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    elif token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as e:
        code, body = e.code, e.read(2000).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None  # answered /health a moment ago: a transient failure is the client's to retry
    host = urllib.parse.urlsplit(url).netloc
    if code == 403 and "host" in body.lower():
        return (f"the MLflow server at {url} answers /health but refuses its API for the host name {host!r} "
                f"(HTTP 403: {body.strip()[:160]}). Start the server with --allowed-hosts listing {host} (and "
                f"the names other nodes use), or set MLFLOW_TRACKING_URI to a host name the server allows")
    if code == 401:
        given = f"the credentials of {_CREDENTIALS[0]}={user}" if user and password else \
            "MLFLOW_TRACKING_TOKEN" if token else None
        if given:
            return (f"the MLflow server at {url} refuses {given} (HTTP 401): check the user name and password "
                    f"(or token) of your account on that server")
        return (f"the MLflow server at {url} wants credentials (HTTP 401): set {_CREDENTIALS[0]} and "
                f"{_CREDENTIALS[1]} to your account on that server (or MLFLOW_TRACKING_TOKEN)")
    if code == 403:
        return (f"the MLflow server at {url} refuses to let {user or 'this client'} read its experiments "
                f"(HTTP 403: {body.strip()[:160]}); ask its administrator for READ permission")
    return None  # another answer (a server without this endpoint, a 5xx): the API is there


def _tcp_problem(uri: str, default_port: int, timeout_s: float) -> str | None:
    try:
        parts = urllib.parse.urlsplit(uri)
        host, port = parts.hostname, parts.port or default_port
    except ValueError as e:
        return f"not a valid URI: {e}"
    if not host:  # a local socket: the database driver reports it
        return None
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as e:
        return f"no connection to {host}:{port}: {e.strerror or e}"


def sqlite_path(uri: str) -> Path:
    """The database file of a ``sqlite:///`` URI."""
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


#: sqlite URIs this process has opened (created/migrated) under the lock already.
_OPENED: set[str] = set()


def open_sqlite_store(uri: str) -> None:
    """Create and migrate the sqlite store ``uri`` once, under a file lock beside it, so that any
    number of processes starting at once on a fresh (or old) database do not race on its schema.
    MLflow keeps one store object per URI in a process, so later clients reuse this one."""
    if uri in _OPENED:
        return
    from filelock import FileLock
    from mlflow.tracking._tracking_service.utils import _get_store

    db = sqlite_path(uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(db) + SQLITE_LOCK_SUFFIX, timeout=300):
        _get_store(uri)  # creates the tables or upgrades them; MLflow caches the store per URI
    _OPENED.add(uri)


def get_client(uri: str | None = None) -> "MlflowClient":
    """An ``MlflowClient`` on ``uri`` (default :func:`tracking_uri`), with cemlab's short HTTP
    retry settings; a sqlite store is opened under its file lock (:func:`open_sqlite_store`)."""
    from mlflow.tracking import MlflowClient

    configure_http()
    for k, v in QUIET_URLS.items():
        os.environ.setdefault(k, v)
    uri = uri or tracking_uri()
    if is_local_sqlite(uri):
        open_sqlite_store(uri)
    return MlflowClient(tracking_uri=uri)


def ensure_experiment(name: str, client: "MlflowClient | None" = None) -> str:
    """The id of experiment ``name``, created if missing (and restored if deleted).

    With a sqlite store opened directly, new experiments put their artifacts under
    :func:`artifact_root` (MLflow would otherwise pick ``./mlruns`` relative to the current
    directory); a server decides the artifact location itself. Safe against a concurrent
    creation of the same name."""
    from mlflow.entities import LifecycleStage
    from mlflow.exceptions import MlflowException

    client = client or get_client()
    exp = client.get_experiment_by_name(name)
    if exp is None:
        location = None
        if is_local_sqlite(client.tracking_uri):
            location = (artifact_root() / _safe_name(name)).as_uri()
        try:
            return client.create_experiment(name, artifact_location=location)
        except MlflowException:
            exp = client.get_experiment_by_name(name)  # created meanwhile by another process
            if exp is None:
                raise
    if exp.lifecycle_stage == LifecycleStage.DELETED:
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def all_experiment_ids(client: "MlflowClient") -> list[str]:
    from mlflow.entities import ViewType

    ids: list[str] = []
    token = None
    while True:
        page = client.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token)
        ids.extend(e.experiment_id for e in page)
        token = page.token
        if not token:
            return ids


def search_runs(client: "MlflowClient", experiment_ids: list[str], filter_string: str) -> list["Run"]:
    """Every active run of ``experiment_ids`` that matches ``filter_string`` (MLflow's search
    grammar), all pages of the search (``MlflowClient.search_runs`` returns one page)."""
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(experiment_ids, filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs



def find_runs_by_hash(hashes: Iterable[str], client: "MlflowClient | None" = None) -> dict[str, list["Run"]]:
    """Active runs carrying ``cemlab.config_hash`` = each of ``hashes``, across all active
    experiments, newest first. Every requested hash is a key (an empty list when none)."""
    wanted = list(dict.fromkeys(hashes))
    out: dict[str, list[Run]] = {h: [] for h in wanted}
    if not wanted:
        return out
    client = client or get_client()
    exp_ids = all_experiment_ids(client)
    if not exp_ids:
        return out
    tag = f"tags.`{schema.CONFIG_HASH}`"
    if len(wanted) <= SCAN_THRESHOLD:
        for h in wanted:
            out[h] = search_runs(client, exp_ids, f"{tag} = '{_quote(h)}'")
    else:
        for run in search_runs(client, exp_ids, f"{tag} LIKE '%'"):
            h = run.data.tags.get(schema.CONFIG_HASH)
            if h in out:
                out[h].append(run)
    for runs in out.values():
        runs.sort(key=lambda r: r.info.start_time or 0, reverse=True)
    return out


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


def run_status(run: "Run") -> str:
    """The run's outcome (``cemlab.tracking.outcomes``) from its ``cemlab.status`` tag and MLflow's status."""
    return outcomes.outcome_from_mlflow(run.data.tags.get(schema.STATUS), run.info.status)


def best_run(runs: list["Run"], statuses: tuple[str, ...] = outcomes.PREFERENCE,
             fallback: bool = False) -> "Run | None":
    """The newest run with the most preferred outcome among ``statuses`` (order = preference);
    with ``fallback``, the newest run of any other outcome when none matches."""
    return outcomes.pick(runs, run_status, statuses, fallback)


def finished_run_for(config_hash: str, client: "MlflowClient | None" = None) -> "Run | None":
    """The run to reuse for a config: the newest finished one, else the newest diverged one
    (a diverged run is a result), else None."""
    runs = find_runs_by_hash([config_hash], client)[config_hash]
    return best_run(runs, outcomes.RESULTS)
