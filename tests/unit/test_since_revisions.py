"""Each refusal beside older builds (ADR 0010's pattern) names the revision of the migration that
added what older builds would misexecute. The lead renumbers migrations at merge: a renumbered
file that left its constant behind would refuse (or admit) the wrong builds."""

import re
from pathlib import Path

import pytest

from scheduler_daemon.domain import control

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"


@pytest.mark.parametrize(
    ("since", "migration"),
    [
        (control.IN_PROCESS_SINCE, "*_task_in_process.py"),
        (control.NOTIFY_SINCE, "*_notification_outbox.py"),
        (control.EITHER_DAYS_SINCE, "*_either_day_field.py"),
        (control.BACKOFF_MAX_SINCE, "*_exponential_backoff.py"),
        (control.SPREAD_SINCE, "*_spread.py"),
        (control.NOTIFY_HEADERS_SINCE, "*_notification_headers_and_firings.py"),
        (control.REPLACE_SINCE, "*_overlap_replace.py"),
        (control.PAUSE_UNTIL_SINCE, "*_pause_until.py"),
        (control.ARGS_SINCE, "*_trigger_args.py"),
        (control.CALENDARS_SINCE, "*_calendars.py"),
    ],
)
def test_the_revision_a_refusal_names_is_its_migrations(since: str, migration: str) -> None:
    (path,) = VERSIONS.glob(migration)
    found = re.search(r'^revision = "(\w+)"$', path.read_text(), re.M)
    assert found is not None
    assert since == found[1] == path.name.split("_")[0]
