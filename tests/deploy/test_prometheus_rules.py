"""The alert rules in deploy/prometheus/ under promtool (Debian package `prometheus`): `promtool
check rules` accepts the file, and `promtool test rules` runs each rule's cases, one that fires
(with its labels and rendered annotations) and one that does not, over synthetic series.

The cases are written here and rendered into promtool's test format, the expected annotations
from the rule's own templates (only `{{ $labels.NAME }}` is used in them), so a changed text
needs no second copy. Without promtool the tests skip; under CI=true they fail (.ci/run
installs it)."""

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_docs import RULES

PROMTOOL = shutil.which("promtool")
LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")
TASK = 'task="nightly",instance="a:9100"'
LOST = "scheduler_daemon_task_lost_firings"


def _promtool() -> str:
    if PROMTOOL is None:
        reason = "no promtool here (Debian package prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: .ci/run must install it)")
        pytest.skip(reason)
    return PROMTOOL


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _case(at: str, series: dict[str, str], fires: list[dict[str, str]]) -> dict[str, Any]:
    return {"at": at, "series": series, "fires": fires}


# alert → (a case that fires, a case that does not); series values in promtool's notation, one
# sample a minute; `fires` lists the labels each firing alert carries besides its own.
CASES: dict[str, tuple[dict[str, Any], ...]] = {
    "SchedulerDaemonNoReplica": (
        _case("5m", {'scheduler_daemon_concurrency{instance="a"}': "4x10"}, [{}]),
        _case("5m", {'scheduler_daemon_info{instance="a"}': "1x10"}, []),
    ),
    "SchedulerDaemonFewReplicas": (
        _case("15m", {'scheduler_daemon_info{instance="a"}': "1x20"}, [{}]),
        _case(
            "15m",
            {
                'scheduler_daemon_info{instance="a"}': "1x20",
                'scheduler_daemon_info{instance="b"}': "1x20",
            },
            [],
        ),
    ),
    "SchedulerDaemonDatabaseUnreachable": (
        _case(
            "5m",
            {'scheduler_daemon_fleet_sample_age_seconds{instance="a"}': "0+60x10"},
            [{"instance": "a"}],
        ),
        _case("5m", {'scheduler_daemon_fleet_sample_age_seconds{instance="a"}': "2x10"}, []),
    ),
    "SchedulerDaemonPassesFailing": (
        _case(
            "5m",
            {'scheduler_daemon_consecutive_failed_passes{instance="a"}': "5x10"},
            [{"instance": "a"}],
        ),
        _case("5m", {'scheduler_daemon_consecutive_failed_passes{instance="a"}': "4x10"}, []),
    ),
    "SchedulerDaemonLoopStalled": (
        _case(
            "15m",
            {'scheduler_daemon_loop_iteration_seconds_count{instance="a"}': "100x20"},
            [{"instance": "a"}],
        ),
        _case(
            "15m", {'scheduler_daemon_loop_iteration_seconds_count{instance="a"}': "0+60x20"}, []
        ),
    ),
    "SchedulerDaemonLeaseRenewalsFailing": (
        _case(
            "5m",
            {'scheduler_daemon_lease_renewal_failures_total{instance="a"}': "0+1x10"},
            [{"instance": "a"}],
        ),
        _case("5m", {'scheduler_daemon_lease_renewal_failures_total{instance="a"}': "3x10"}, []),
    ),
    "SchedulerDaemonRunsTakenOver": (
        _case("5m", {'scheduler_daemon_takeovers_total{instance="a"}': "0 0 1 1 1 1 1 1"}, [{}]),
        _case("20m", {'scheduler_daemon_takeovers_total{instance="a"}': "2x25"}, []),
    ),
    "SchedulerDaemonBudgetSaturated": (
        _case(
            "20m",
            {
                'scheduler_daemon_executing_runs{instance="a"}': "16x30",
                'scheduler_daemon_max_concurrent_runs{instance="a"}': "16x30",
            },
            [{}],
        ),
        _case(
            "20m",
            {
                'scheduler_daemon_executing_runs{instance="a"}': "15x30",
                'scheduler_daemon_max_concurrent_runs{instance="a"}': "16x30",
            },
            [],
        ),
    ),
    "SchedulerDaemonBudgetLockHeld": (
        _case(
            "5m", {'scheduler_daemon_budget_lock_blocked_seconds{instance="a"}': "0+30x10"}, [{}]
        ),
        _case(
            "5m",
            {'scheduler_daemon_budget_lock_blocked_seconds{instance="a"}': "0 30 0 30 0 30"},
            [],
        ),
    ),
    "SchedulerDaemonStartsLate": (
        _case(  # every start 60-120 s late: the 95th percentile is past a minute
            "25m",
            {
                'scheduler_daemon_run_start_lag_seconds_bucket{instance="a",le="60"}': "0x40",
                'scheduler_daemon_run_start_lag_seconds_bucket{instance="a",le="120"}': "0+10x40",
                'scheduler_daemon_run_start_lag_seconds_bucket{instance="a",le="+Inf"}': "0+10x40",
            },
            [{}],
        ),
        _case(
            "25m",
            {
                'scheduler_daemon_run_start_lag_seconds_bucket{instance="a",le="60"}': "0+10x40",
                'scheduler_daemon_run_start_lag_seconds_bucket{instance="a",le="120"}': "0+10x40",
                'scheduler_daemon_run_start_lag_seconds_bucket{instance="a",le="+Inf"}': "0+10x40",
            },
            [],
        ),
    ),
    "SchedulerDaemonTaskNoRecentSuccess": (
        _case(  # hourly; succeeded at 1000, then the firings at 4600 and 8200 did not
            "10m",
            {
                f"scheduler_daemon_task_last_success_timestamp_seconds{{{TASK}}}": "1005x10",
                f"scheduler_daemon_task_last_schedule_timestamp_seconds{{{TASK}}}": "8200x10",
                f"scheduler_daemon_task_next_schedule_timestamp_seconds{{{TASK}}}": "11800x10",
                f"scheduler_daemon_task_running{{{TASK}}}": "0x10",
            },
            [{"task": "nightly"}],
        ),
        _case(  # one firing (4600) missed: one interval, not two
            "10m",
            {
                f"scheduler_daemon_task_last_success_timestamp_seconds{{{TASK}}}": "1005x10",
                f"scheduler_daemon_task_last_schedule_timestamp_seconds{{{TASK}}}": "4600x10",
                f"scheduler_daemon_task_next_schedule_timestamp_seconds{{{TASK}}}": "8200x10",
                f"scheduler_daemon_task_running{{{TASK}}}": "0x10",
            },
            [],
        ),
        _case(  # two missed, but the third is running: its outcome is not known yet
            "10m",
            {
                f"scheduler_daemon_task_last_success_timestamp_seconds{{{TASK}}}": "1005x10",
                f"scheduler_daemon_task_last_schedule_timestamp_seconds{{{TASK}}}": "8200x10",
                f"scheduler_daemon_task_next_schedule_timestamp_seconds{{{TASK}}}": "11800x10",
                f"scheduler_daemon_task_running{{{TASK}}}": "1x10",
            },
            [],
        ),
        _case(  # a weekday cron on Friday: it succeeded; its next firing is 3 days away,
            "10m",  # and a long gap ahead is no missed firing
            {
                f"scheduler_daemon_task_last_success_timestamp_seconds{{{TASK}}}": "1005x10",
                f"scheduler_daemon_task_last_schedule_timestamp_seconds{{{TASK}}}": "1000x10",
                f"scheduler_daemon_task_next_schedule_timestamp_seconds{{{TASK}}}": "260200x10",
                f"scheduler_daemon_task_running{{{TASK}}}": "0x10",
            },
            [],
        ),
        _case(  # the same cron on Monday: that firing failed. The rule measures time, so
            "10m",  # three days without a success are more than two of its (daily) intervals
            {
                f"scheduler_daemon_task_last_success_timestamp_seconds{{{TASK}}}": "1005x10",
                f"scheduler_daemon_task_last_schedule_timestamp_seconds{{{TASK}}}": "260200x10",
                f"scheduler_daemon_task_next_schedule_timestamp_seconds{{{TASK}}}": "346600x10",
                f"scheduler_daemon_task_running{{{TASK}}}": "0x10",
            },
            [{"task": "nightly"}],
        ),
    ),
    "SchedulerDaemonTaskLosingFirings": (
        _case(  # a second firing skipped for overlap within the hour
            "75m",
            {
                f'scheduler_daemon_task_lost_firings{{{TASK},reason="overlap"}}': "1x60 2x30",
                'scheduler_daemon_info{instance="a:9100"}': "1x90",
            },
            [{"task": "nightly", "reason": "overlap"}],
        ),
        _case(  # its first lost firing, the fleet scraped for over an hour before
            "80m",
            {
                f'{LOST}{{{TASK},reason="start_deadline"}}': "_x70 1x20",
                'scheduler_daemon_info{instance="a:9100"}': "1x90",
            },
            [{"task": "nightly", "reason": "start_deadline"}],
        ),
        _case(  # losses older than an hour, and a pause's skips, which an operator chose
            "130m",
            {
                f'scheduler_daemon_task_lost_firings{{{TASK},reason="overlap"}}': "3x140",
                f'scheduler_daemon_task_lost_firings{{{TASK},reason="paused"}}': "1x100 5x40",
                'scheduler_daemon_info{instance="a:9100"}': "1x140",
            },
            [],
        ),
        _case(  # a fresh Prometheus: old losses are not new ones
            "30m",
            {
                f'scheduler_daemon_task_lost_firings{{{TASK},reason="overlap"}}': "3x40",
                'scheduler_daemon_info{instance="a:9100"}': "1x40",
            },
            [],
        ),
    ),
    "SchedulerDaemonTaskFailing": (
        _case(
            "5m",
            {
                f"scheduler_daemon_task_consecutive_failures{{{TASK}}}": "3x10",
                'scheduler_daemon_task_consecutive_failures{task="ok",instance="b:9100"}': "0x10",
            },
            [{"task": "nightly"}],
        ),
        _case("5m", {f"scheduler_daemon_task_consecutive_failures{{{TASK}}}": "2x10"}, []),
    ),
}


def _render(text: str, labels: dict[str, str]) -> str:
    rendered = LABEL.sub(lambda m: labels[m[1]], text)
    assert "{{" not in rendered, f"a template construct this test cannot render: {text!r}"
    return rendered


def _test_file(alert: str, case: dict[str, Any], tmp_path: Path) -> Path:
    rule = _rules()[alert]
    expected = []
    for extra in case["fires"]:
        labels = {**rule["labels"], **extra}
        annotations = {k: _render(v, labels) for k, v in rule["annotations"].items()}
        expected.append({"exp_labels": labels, "exp_annotations": annotations})
    document = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case["series"].items()],
                "alert_rule_test": [
                    {"eval_time": case["at"], "alertname": alert, "exp_alerts": expected}
                ],
            }
        ],
    }
    path = tmp_path / "rules.test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_promtool_accepts_the_rules_file() -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_every_rule_has_a_case_that_fires_and_one_that_does_not() -> None:
    assert set(CASES) == set(_rules())
    for alert, cases in CASES.items():
        assert any(c["fires"] for c in cases), alert
        assert any(not c["fires"] for c in cases), alert


@pytest.mark.parametrize(
    ("alert", "case"),
    [(alert, case) for alert, cases in CASES.items() for case in cases],
    ids=[
        f"{alert}-{'fires' if case['fires'] else 'quiet'}-{i}"
        for alert, cases in CASES.items()
        for i, case in enumerate(cases)
    ],
)
def test_promtool_runs_the_rules_case(alert, case, tmp_path: Path) -> None:
    path = _test_file(alert, case, tmp_path)
    result = subprocess.run(
        [_promtool(), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout
