"""`audit` after a failover (issue 32, item 5): the occurrences created before the fleet's first
sighting of a later epoch and run after it may have run on the lost branch too, which this
database no longer shows; audit lists them as a notice (how many, a few ids), in its text and its
JSON, and the exit code stays 0. The first epoch a fleet records is no failover.

On 2a764ea audit has no notices: the JSON has no `notices` key (KeyError in
`test_runs_after_a_failover_of_occurrences_created_before_it_are_a_notice_not_a_violation`) and the
text no `notice,` line."""

from datetime import datetime, timedelta
from typing import Any

from tests.integration.test_audit import _now, _occurrence, _run
from tests.support import query, shell_task

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def _epoch(url: str, timeline: int, first_seen_at: datetime) -> None:
    query(
        url,
        "INSERT INTO fleet_epoch SELECT system_identifier, %s, %s FROM pg_control_system()",
        (timeline, first_seen_at),
    )


def _notices(cli: Any, *args: str) -> list[dict[str, Any]]:
    result = cli("audit", "--json", *args)
    assert result.code == 0, result.out + result.err  # a notice is no violation
    report = result.json()
    assert report["ok"] is True
    assert report["violations"] == []
    return report["notices"]


def test_runs_after_a_failover_of_occurrences_created_before_it_are_a_notice_not_a_violation(
    cli, client, database_url
) -> None:
    t = _now(database_url)
    recorded, failover = t - 30 * MINUTE, t - 10 * MINUTE
    task = shell_task(client)

    def occurrence(seq: int, created: timedelta, *starts: timedelta) -> int:
        occ = _occurrence(
            database_url,
            task.id,
            seq,
            scheduled_for=failover - seq * MINUTE,
            created_at=failover + created,
        )
        for token, start in enumerate(starts, 1):
            status = "success" if token == len(starts) else "failed"
            _run(
                database_url,
                occ,
                token=token,
                start=failover + start,
                end=failover + start + SECOND,
                status=status,
            )
        return occ

    # Created before the failover, a run after it: may have run twice (whatever ran before).
    rerun = [occurrence(1, -20 * SECOND, -19 * SECOND, 5 * SECOND)]
    rerun += [occurrence(seq, -5 * SECOND, 3 * SECOND) for seq in range(2, 14)]
    # Neither: ran and ended before the failover; created after it.
    occurrence(14, -60 * SECOND, -59 * SECOND)
    occurrence(15, 2 * SECOND, 3 * SECOND)
    # The first epoch the fleet recorded is no failover: nothing to say.
    _epoch(database_url, 1, recorded)
    assert _notices(cli) == []

    _epoch(database_url, 2, failover)  # a promotion, first seen at `failover`
    (notice,) = _notices(cli)
    assert notice["notice"] == "epoch_change_rerun"
    rows = notice["rows"]
    assert rows["timeline"] == 2
    assert datetime.fromisoformat(rows["failover_seen_at"]) == failover
    assert rows["occurrence_count"] == len(rerun) == 13
    assert rows["occurrence_ids"] == sorted(rerun)[:10]  # a few ids, the count says how many
    assert str(sorted(rerun)[0]) in notice["message"]
    assert "13 occurrence(s)" in notice["message"]

    # --since applies to the later run's start: a window after the reruns lists none.
    assert _notices(cli, "--since", (failover + 10 * SECOND).isoformat()) == []

    text = cli("audit")
    assert text.code == 0, text.out + text.err
    first, summary = text.out.strip().splitlines()
    assert first.startswith("notice, epoch_change_rerun: 13 occurrence(s) created before the ")
    assert summary.startswith("audit: no violations in 12 check(s)")
