"""docker/k8s/: the KubeRay RayJob and the tracking stack (PostgreSQL, MLflow with basic auth),
checked offline with pydantic models of the fields they use (``extra="forbid"``: a misspelt or
misplaced field is an error, as the API server would prune or reject it) and by their wiring.

No Kubernetes cluster runs here. The RayJob was also validated once against KubeRay's own CRD
schema (docs/cluster.md says how to repeat that).
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

K8S = Path(__file__).resolve().parents[1] / "docker" / "k8s"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SecretKeyRef(Strict):
    name: str
    key: str
    optional: bool | None = None


class FieldRef(Strict):
    fieldPath: str


class EnvSource(Strict):
    secretKeyRef: SecretKeyRef | None = None
    fieldRef: FieldRef | None = None


class EnvVar(Strict):
    name: str
    value: str | None = None
    valueFrom: EnvSource | None = None


class Port(Strict):
    name: str | None = None
    containerPort: int = Field(ge=1, le=65535)


class Resources(Strict):
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}


class Mount(Strict):
    name: str
    mountPath: str
    readOnly: bool | None = None


class Probe(Strict):
    exec: dict | None = None
    httpGet: dict | None = None
    periodSeconds: int | None = None


class Container(Strict):
    name: str
    image: str
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] = []
    ports: list[Port] = []
    resources: Resources | None = None
    volumeMounts: list[Mount] = []
    readinessProbe: Probe | None = None


class Volume(Strict):
    name: str
    persistentVolumeClaim: dict | None = None
    emptyDir: dict | None = None
    secret: dict | None = None


class Toleration(Strict):
    key: str
    operator: Literal["Exists", "Equal"]
    effect: str | None = None


class PodSpec(Strict):
    containers: list[Container]
    volumes: list[Volume] = []
    tolerations: list[Toleration] = []


class PodTemplate(Strict):
    metadata: dict | None = None
    spec: PodSpec


class HeadGroup(Strict):
    serviceType: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = None
    rayStartParams: dict[str, str]
    template: PodTemplate


class WorkerGroup(Strict):
    groupName: str
    replicas: int = Field(ge=0)
    minReplicas: int = Field(ge=0)
    maxReplicas: int = Field(ge=0)
    rayStartParams: dict[str, str]
    template: PodTemplate


class RayClusterSpec(Strict):
    rayVersion: str
    headGroupSpec: HeadGroup
    workerGroupSpecs: list[WorkerGroup]


class RayJobSpec(Strict):
    entrypoint: str
    shutdownAfterJobFinishes: bool
    ttlSecondsAfterFinished: int | None = None
    backoffLimit: int | None = None
    rayClusterSpec: RayClusterSpec


class Metadata(Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    labels: dict[str, str] = {}


class RayJob(Strict):
    apiVersion: Literal["ray.io/v1"]
    kind: Literal["RayJob"]
    metadata: Metadata
    spec: RayJobSpec


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


@pytest.fixture(scope="module")
def rayjob() -> RayJob:
    (doc,) = _docs("rayjob.yaml")
    return RayJob.model_validate(doc)


@pytest.fixture(scope="module")
def tracking() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in _docs("tracking.yaml")}


def containers(job: RayJob) -> list[Container]:
    spec = job.spec.rayClusterSpec
    return [*spec.headGroupSpec.template.spec.containers,
            *(c for g in spec.workerGroupSpecs for c in g.template.spec.containers)]


def test_rayjob_fields_and_gpus(rayjob):
    spec = rayjob.spec.rayClusterSpec
    assert spec.rayVersion == importlib.metadata.version("ray")  # the image's Ray, which cemlab is tested with
    assert spec.headGroupSpec.rayStartParams["num-gpus"] == "0" and spec.headGroupSpec.serviceType == "ClusterIP"
    for group in spec.workerGroupSpecs:
        (c,) = group.template.spec.containers
        gpus = group.rayStartParams["num-gpus"]
        assert c.resources.limits["nvidia.com/gpu"] == c.resources.requests["nvidia.com/gpu"] == gpus
        assert group.minReplicas <= group.replicas <= group.maxReplicas
    total = sum(int(g.rayStartParams["num-gpus"]) * g.replicas for g in spec.workerGroupSpecs)
    from cemlab.sweeps.sweepfile.load import load_sweep

    need = max(t.resources.workers * t.resources.gpus_per_worker for t in load_sweep("recursion_ablation").expand("paper"))
    assert total >= need  # the cluster holds at least one paper trial
    assert re.match(r"cemlab data prepare recursion_ablation --scale paper &&\s+cemlab sweep recursion_ablation "
                    r"--scale paper", rayjob.spec.entrypoint)  # data first, once, then the sweep
    assert len({c.image for c in containers(rayjob)}) == 1
    for c in containers(rayjob):
        assert {m.mountPath for m in c.volumeMounts} >= {"/data", "/dev/shm"}


def test_no_secret_in_the_manifests_and_the_wiring(rayjob, tracking):
    for name in ("rayjob.yaml", "tracking.yaml"):
        for doc in _docs(name):
            for env in _all_env(doc):
                if re.search(r"PASSWORD|TOKEN|SECRET", env["name"]):
                    assert "value" not in env and "secretKeyRef" in env["valueFrom"], (name, env["name"])
    # the trials' tracking server is tracking.yaml's MLflow service, which runs the auth app
    svc = tracking[("Service", "cemlab-mlflow")]
    port = svc["spec"]["ports"][0]["port"]
    for c in containers(rayjob):
        env = {e.name: e for e in c.env}
        assert env["MLFLOW_TRACKING_URI"].value == f"http://cemlab-mlflow:{port}"
        assert env["MLFLOW_TRACKING_USERNAME"].valueFrom.secretKeyRef.name == "cemlab-mlflow-user"
    mlflow = tracking[("Deployment", "cemlab-mlflow")]["spec"]["template"]["spec"]["containers"][0]
    assert "--app-name basic-auth" in " ".join(mlflow["args"])
    # The backend-store URI (with the password) comes through the environment, never argv: MLflow
    # reads MLFLOW_BACKEND_STORE_URI, and Kubernetes expands $(POSTGRES_PASSWORD) only from a
    # variable defined earlier in the same list.
    assert "--backend-store-uri" not in " ".join(mlflow["command"] + mlflow["args"])
    assert "PASSWORD" not in " ".join(mlflow["command"] + mlflow["args"])
    names = [e["name"] for e in mlflow["env"]]
    uri = next(e["value"] for e in mlflow["env"] if e["name"] == "MLFLOW_BACKEND_STORE_URI")
    assert uri == "postgresql+psycopg2://mlflow:$(POSTGRES_PASSWORD)@cemlab-postgres:5432/mlflow"
    assert names.index("POSTGRES_PASSWORD") < names.index("MLFLOW_BACKEND_STORE_URI")
    assert all(d["spec"]["type"] == "ClusterIP" for (kind, _), d in tracking.items() if kind == "Service")
    # every Deployment / StatefulSet selects its own pods
    for (kind, name), d in tracking.items():
        if kind in ("Deployment", "StatefulSet"):
            assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
            Container.model_validate(d["spec"]["template"]["spec"]["containers"][0])


def _all_env(node) -> list[dict]:
    if isinstance(node, dict):
        found = list(node["env"]) if isinstance(node.get("env"), list) else []
        return found + [e for v in node.values() for e in _all_env(v)]
    if isinstance(node, list):
        return [e for v in node for e in _all_env(v)]
    return []


def test_the_models_catch_a_misplaced_field():
    (doc,) = _docs("rayjob.yaml")
    doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["gpus"] = 8
    with pytest.raises(ValidationError, match="gpus"):
        RayJob.model_validate(doc)
    (doc,) = _docs("rayjob.yaml")
    doc["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] = 0  # must be a string
    with pytest.raises(ValidationError, match="num-gpus"):
        RayJob.model_validate(doc)
