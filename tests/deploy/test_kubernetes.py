"""The kustomize base in deploy/kubernetes: every resource valid against the Kubernetes schemas
(offline, kubernetes-validate), the kustomization naming exactly the files beside it, and the
fields that must agree with each other and with the daemon's settings."""

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.settings import SHUTDOWN_MARGIN, DaemonSettings
from scheduler_daemon.version import __version__
from tests.deploy.options import variables

BASE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
# The oldest Kubernetes release the base is meant for, and the newest whose schemas we ship.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((BASE / "kustomization.yaml").read_text())


def _resources() -> dict[str, dict[str, Any]]:
    """kind → the resource, for every file the kustomization lists (one document each)."""
    found = {}
    for name in _kustomization()["resources"]:
        (document,) = yaml.safe_load_all((BASE / name).read_text())
        found[document["kind"]] = document
    return found


def _pod() -> dict[str, Any]:
    return _resources()["Deployment"]["spec"]["template"]


def _daemon_container() -> dict[str, Any]:
    (container,) = (c for c in _pod()["spec"]["containers"] if c["args"] == ["run"])
    return container


def _environment(container: dict[str, Any]) -> dict[str, str]:
    """The variables the container sees: envFrom ConfigMaps, then env, which wins."""
    config_maps = {"scheduler-daemon": _resources()["ConfigMap"]["data"]}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        env[item["name"]] = item["value"] if "value" in item else f"<{item['valueFrom']}>"
    return env


def test_the_kustomization_lists_exactly_the_manifests_beside_it() -> None:
    kustomization = _kustomization()
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a resource is listed twice"
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk


@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    resources = _resources()
    assert set(resources) == {"ConfigMap", "Secret", "Deployment", "PodDisruptionBudget"}
    for kind, resource in resources.items():
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kind} is invalid for Kubernetes {version}: {exc.message}")


def test_the_image_is_the_one_the_kustomization_tags_with_this_release() -> None:
    (image,) = _kustomization()["images"]
    assert image["newTag"] == __version__
    containers = _pod()["spec"]["containers"] + _pod()["spec"]["initContainers"]
    assert {c["image"] for c in containers} == {image["name"]}


def test_probes_and_scrapes_reach_the_port_the_daemon_listens_on_at_the_pod_ip() -> None:
    container = _daemon_container()
    env = _environment(container)
    # The daemon's default host, 127.0.0.1, is unreachable from the kubelet and from Prometheus.
    assert env["SCHEDULER_HTTP_HOST"] == "0.0.0.0"
    port = int(env["SCHEDULER_HTTP_PORT"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    probes["startupProbe"] = container["startupProbe"]["httpGet"]
    for kind, probe in probes.items():
        target = probe["port"]
        assert (ports[target] if isinstance(target, str) else target) == port, kind
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    annotations = _pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_grace_period_outlasts_the_drain_the_daemon_is_given() -> None:
    env = _environment(_daemon_container())
    grace = _pod()["spec"]["terminationGracePeriodSeconds"]
    stop = parse_duration(env["SCHEDULER_STOP_TIMEOUT"])
    drain = parse_duration(env.get("SCHEDULER_DRAIN_TIMEOUT", "20s"))
    assert stop.total_seconds() == grace
    assert drain + SHUTDOWN_MARGIN < stop
    DaemonSettings(stop_timeout=stop, drain_timeout=drain).validate()


def test_the_manifests_set_only_variables_the_daemon_reads() -> None:
    pod = _pod()["spec"]
    known = variables()
    for container in pod["containers"] + pod["initContainers"]:
        unknown = set(_environment(container)) - known
        assert not unknown, f"{container['name']} sets variables no option reads: {unknown}"


def test_the_owner_url_reaches_the_migrate_and_grant_steps_only() -> None:
    pod = _pod()["spec"]
    migrate, grant = pod["initContainers"]  # in this order: grants name the migrated tables
    assert migrate["args"] == ["migrate"]
    assert grant["args"] == ["db", "roles"]

    def secret_keys(container: dict[str, Any]) -> set[str]:
        return {
            e["valueFrom"]["secretKeyRef"]["key"]
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        }

    assert secret_keys(migrate) == secret_keys(grant) == {"migrate-database-url"}
    assert secret_keys(_daemon_container()) == {"database-url"}
    assert set(_resources()["Secret"]["stringData"]) == {"database-url", "migrate-database-url"}


def test_the_pods_run_unprivileged_on_a_read_only_root_with_resources() -> None:
    pod = _pod()["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"] + pod["initContainers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"], container["name"]
        assert container["resources"]["requests"], container["name"]
        assert "cpu" not in container["resources"].get("limits", {}), "throttling delays renewals"


def test_the_disruption_budget_covers_the_deployments_pods_and_leaves_most_running() -> None:
    deployment = _resources()["Deployment"]
    budget = _resources()["PodDisruptionBudget"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["replicas"] == 3
    assert budget["maxUnavailable"] == 1
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert (strategy["maxSurge"], strategy["maxUnavailable"]) == (0, 1)
