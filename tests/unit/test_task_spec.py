"""TaskSpec rules (pure): every refused definition is one line naming what is wrong."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.domain.task import MAX_PAYLOAD_BYTES, InvalidTask, TaskSpec

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
HTTP = {"executor": "http", "target": "https://hook.example/x"}


def spec(**kw: object) -> TaskSpec:
    fields: dict[str, object] = {
        "name": "t",
        "executor": "shell",
        "target": "true",
        "every": timedelta(minutes=5),
    }
    fields.update(kw)
    return TaskSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"executor": "ftp"}, "unknown executor 'ftp': choose one of shell, http, python"),
        ({"overlap": "sometimes"}, "unknown overlap 'sometimes'"),
        ({"misfire": "maybe"}, "unknown misfire 'maybe'"),
        ({"name": ""}, "task name must be 1 to 200 characters"),
        ({"name": " padded "}, "without surrounding spaces"),
        ({"name": "123"}, "must not be all digits"),
        ({"cron": "* * * * *"}, "give exactly one schedule"),
        ({"every": None}, "give exactly one schedule"),
        ({"timezone": "Nowhere/City"}, "unknown time zone 'Nowhere/City'"),
        ({"every": timedelta(0)}, "--every must be positive"),
        ({"timeout": timedelta(seconds=-1)}, "--timeout must be positive"),
        ({"misfire_grace": timedelta(seconds=-1)}, "--misfire-grace must not be negative"),
        ({"max_attempts": 0}, "--max-attempts must be at least 1"),
        (
            {"backoff": timedelta(seconds=30), "backoff_max": timedelta(seconds=10)},
            "--backoff-max 10s is below --backoff 30s",
        ),
        (
            {"backoff": timedelta(0), "backoff_max": timedelta(minutes=1)},
            "--backoff-max needs a --backoff above zero",
        ),
        ({"backoff_max": timedelta(0)}, "--backoff-max must be positive"),
        ({"catchup_limit": 0}, "--catchup-limit must be at least 1"),
        ({"misfire": "run_all"}, "--misfire run_all with --overlap forbid could only skip"),
        (
            {"misfire": "run_all", "overlap": "replace"},
            "--misfire run_all with --overlap replace could only skip",
        ),
        ({"executor": "http", "target": "ftp://x"}, "needs an http:// or https:// URL"),
        ({"executor": "python", "target": "no colon"}, "needs MODULE:FUNCTION"),
        ({"target": "x" * MAX_PAYLOAD_BYTES}, f"the limit is {MAX_PAYLOAD_BYTES} bytes"),
        ({"target": "  "}, "must not be empty"),
        ({"headers": (("Accept", "x"),)}, "--header is for --http tasks only"),
        (HTTP | {"headers": (("Bad Name", "x"),)}, "'Bad Name' is not a valid HTTP header name"),
        (HTTP | {"headers": (("Idempotency-Key", "x"),)}, "set by the http executor itself"),
        (HTTP | {"headers": (("A", "1"), ("a", "2"))}, "--header a is given twice"),
        (HTTP | {"headers": (("X-Api-Key", "s\r\nX: y"),)}, "must not contain line breaks"),
        ({"executor": "http", "target": "ftp://u:secret@x"}, "got 'ftp://u:\\*\\*\\*@x'"),
    ],
)
def test_a_bad_definition_is_refused_with_one_line(changes: dict, message: str) -> None:
    with pytest.raises(InvalidTask, match=message.replace("(", r"\(")) as err:
        spec(**changes).validate(NOW)
    assert "\n" not in str(err.value)


def test_a_one_shot_instant_must_be_in_the_future_of_the_database_clock() -> None:
    past = spec(every=None, at=NOW - timedelta(seconds=1))
    with pytest.raises(InvalidTask, match="is in the past"):
        past.validate(NOW)
    past.validate()  # without the database clock the rule is not checked yet
    spec(every=None, at=NOW + timedelta(seconds=1)).validate(NOW)


def test_setting_one_schedule_kind_clears_the_others() -> None:
    changed = spec().with_changes(cron="0 3 * * *")
    assert (changed.cron, changed.every, changed.at) == ("0 3 * * *", None, None)
    assert changed.schedule_kind == "cron"


def test_headers_ride_in_the_payload_and_leave_with_the_http_target() -> None:
    hooked = spec(**HTTP, headers=(("Authorization", "Bearer s"),))
    assert hooked.payload == {"url": HTTP["target"], "headers": {"Authorization": "Bearer s"}}
    assert hooked.with_changes(executor="shell", target="true").headers == ()
    assert hooked.with_changes(target="https://other.example/").headers == hooked.headers


def test_the_payload_names_the_target_by_executor() -> None:
    assert spec().payload == {"command": "true"}
    assert spec(executor="http", target="https://x/y").payload == {"url": "https://x/y"}
    assert spec(executor="python", target="m:f").payload == {"target": "m:f"}
