"""Jobs never see the daemon's database credentials in their environment."""

import pytest

from scheduler_daemon.executors.base import JOB_ENV_SECRETS, job_environment


def test_the_job_environment_drops_the_database_credentials_and_keeps_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in JOB_ENV_SECRETS:
        monkeypatch.setenv(name, "secret")
    monkeypatch.setenv("HOME_FOR_JOBS", "kept")
    env = job_environment()
    assert set(JOB_ENV_SECRETS).isdisjoint(env)
    assert env["HOME_FOR_JOBS"] == "kept"
