"""`tasks apply` and `tasks export` against a real database: the diff, the round trip
(`export | apply` changes nothing), --prune of what this source created, --adopt of hand-made
tasks, ${VAR} references in headers, and a bad file that changes nothing."""

from pathlib import Path
from typing import Any

import pytest

from tests.support import query

FILE = """
[nightly]
cron = "30 2 * * *"
timezone = "Europe/Berlin"
command = "backup --all"
overlap = "forbid"
misfire-grace = "5m"
history-retention = "7d"

[hook]
http = "https://example.com/hook"
every = "1h"
headers = { Authorization = "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}", X-Team = "ops" }
max-attempts = 3

["report job"]
call = "reports.jobs:daily"
cron = "0 6 * * 1-5"
paused = true
"""


@pytest.fixture
def write(tmp_path: Path) -> Any:
    def write(text: str, name: str = "tasks.toml") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SCHEDULER_SECRET_HOOK_TOKEN", "s3cret-token")
    return "s3cret-token"


def _apply(cli: Any, path: str, *args: str) -> Any:
    return cli("tasks", "apply", "-f", path, "--source", "deploy/tasks.toml", *args)


def test_apply_creates_the_tasks_and_export_apply_changes_nothing(cli, write, database_url):
    first = _apply(cli, write(FILE))
    assert first.code == 0, first.err
    assert first.out.splitlines() == [
        "+ added hook",
        "+ added nightly",
        "+ added report job",
        "3 task(s) in the file, 3 change(s)",
    ]
    hook = cli("tasks", "show", "hook", "--json", "--show-secrets").json()
    assert hook["headers"] == {"Authorization": "Bearer s3cret-token", "X-Team": "ops"}
    assert hook["source"] == "deploy/tasks.toml"
    assert hook["max_attempts"] == 3
    nightly = cli("tasks", "show", "nightly", "--json").json()
    assert (nightly["timezone"], nightly["history_retention_seconds"]) == ("Europe/Berlin", 604800)
    assert cli("tasks", "show", "report job", "--json").json()["paused"] is True

    exported = cli("tasks", "export")
    assert exported.code == 0, exported.err
    assert "Bearer ${SCHEDULER_SECRET_HOOK_TOKEN}" in exported.out  # the reference, not its value
    assert "s3cret-token" not in exported.out
    before = query(database_url, "SELECT * FROM task ORDER BY id")
    again = _apply(cli, write(exported.out, "exported.toml"))
    assert again.code == 0, again.err
    assert again.out.splitlines() == ["3 task(s) in the file, 0 change(s)"]
    assert query(database_url, "SELECT * FROM task ORDER BY id") == before

    with_secrets = cli("tasks", "export", "hook", "--include-secrets")
    assert "Bearer s3cret-token" in with_secrets.out


def test_a_changed_file_updates_and_prune_deletes_what_this_source_created(cli, write, client):
    assert _apply(cli, write(FILE)).code == 0
    text = FILE.replace('cron = "30 2 * * *"', 'cron = "45 2 * * *"').split('["report job"]')[0]
    dry = _apply(cli, write(text), "--dry-run")
    assert dry.out.splitlines()[:2] == ["~ changed nightly: cron", "- would delete report job"]
    assert client.get_task("nightly").spec.cron == "30 2 * * *"  # a dry run writes nothing
    kept = _apply(cli, write(text))
    assert kept.out.splitlines()[:2] == ["~ changed nightly: cron", "- would delete report job"]
    assert client.get_task("nightly").spec.cron == "45 2 * * *"
    assert client.get_task("report job").name == "report job"  # without --prune it stays
    pruned = _apply(cli, write(text), "--prune")
    assert pruned.out.splitlines()[0] == "- deleted report job"
    assert [t.name for t in client.list_tasks()] == ["hook", "nightly"]
    # Another source's apply never prunes these.
    other = cli(
        "tasks",
        "apply",
        "-f",
        write('[x]\ncommand = "true"\nevery = "1h"\n', "o.toml"),
        "--source",
        "other",
        "--prune",
    )
    assert other.out.splitlines()[0] == "+ added x"
    assert [t.name for t in client.list_tasks()] == ["hook", "nightly", "x"]


def test_a_hand_made_task_is_refused_unless_adopted_and_a_masked_secret_is_kept(
    cli, write, client, counts
) -> None:
    made = cli(
        "tasks",
        "add",
        "hook",
        "--http",
        "https://example.com/hook",
        "--every",
        "1h",
        "--header",
        "Authorization: Bearer by-hand",
    )
    assert made.code == 0, made.err
    exported = cli("tasks", "export", "hook").out
    assert '"Authorization" = "***"' in exported
    # Defined exactly as it is: left alone, not taken over.
    same = _apply(cli, write(exported))
    assert same.out.splitlines() == ["1 task(s) in the file, 0 change(s)"]
    assert client.get_task("hook").source is None
    before = counts()
    refused = _apply(cli, write(exported.replace('every = "1h"', 'every = "2h"')))
    assert refused.code == 2
    assert refused.err == (
        "error: task 'hook' was made by hand; --adopt takes it over for 'deploy/tasks.toml', or"
        " rename it in the file\n"
    )
    assert counts() == before
    adopted = _apply(cli, write(exported.replace('every = "1h"', 'every = "2h"')), "--adopt")
    assert adopted.out.splitlines()[0] == "~ adopted hook: every"
    task = client.get_task("hook")
    assert task.source == "deploy/tasks.toml"
    assert dict(task.spec.headers) == {"Authorization": "Bearer by-hand"}  # *** kept the value
    gone = _apply(cli, write('[other]\ncommand = "true"\nevery = "1h"\n'), "--prune")
    assert "- deleted hook" in gone.out.splitlines()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[a]\ncommand = "true"\nevery = "1h"\n'
            '[b]\ncommand = "true"\nevery = "1h"\nretries = 2\n',
            "task 'b': field 'retries': unknown field",
        ),
        ('[a]\ncommand = "true"\nevery = "soon"\n', "task 'a': field 'every': invalid duration"),
        ('[a]\ncommand = "true"\ncron = "* * *"\n', "task 'a': invalid cron expression"),
        (
            '[a]\ncommand = "true"\nevery = "1h"\nmisfire = "run_all"\n',
            "task 'a': --misfire run_all with --overlap forbid",
        ),
        (
            '[a]\nhttp = "https://x.example"\nevery = "1h"\nheaders = { Authorization = '
            '"Bearer ${SCHEDULER_SECRET_NOT_SET_ANYWHERE}" }\n',
            "task 'a': field 'headers': header Authorization needs the environment variable "
            "SCHEDULER_SECRET_NOT_SET_ANYWHERE, unset",
        ),
        ("[a\n", "not a valid TOML file"),
        (
            '[a]\nhttp = "https://x.example"\nevery = "1h"\nheaders = { Authorization = "***" }\n',
            "task 'a': field 'headers': header Authorization is masked",
        ),
    ],
)
def test_a_bad_file_changes_nothing_and_names_the_task_and_field(
    cli, write, counts, text, message
) -> None:
    assert _apply(cli, write('[keep]\ncommand = "true"\nevery = "1h"\n')).code == 0
    before = counts()
    result = _apply(cli, write('[new-one]\ncommand = "true"\nevery = "1h"\n' + text))
    assert result.code == 2, result.out
    assert result.err.count("\n") == 1
    assert message in result.err
    assert counts() == before


def test_a_prune_that_would_delete_an_active_task_is_refused_whole(cli, write, client, counts):
    assert _apply(cli, write('[busy]\ncommand = "sleep 60"\nevery = "1h"\n')).code == 0
    client.trigger("busy", requested_by="test")
    before = counts()
    result = _apply(cli, write('[fresh]\ncommand = "true"\nevery = "1h"\n'), "--prune")
    assert result.code == 2
    assert "--prune: task 'busy' has 1 active occurrence(s)" in result.err
    assert counts() == before


def test_a_reference_to_any_variable_but_a_scheduler_secret_is_refused_and_nothing_written(
    cli, write, database_url, monkeypatch
) -> None:
    # On 646db2b `${SCHEDULER_DATABASE_URL}` stored the applier's URL, password included, and
    # the reader role's `tasks show` printed it (issue 29).
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", "postgresql://app:pw-of-applier@db/app")
    before = query(database_url, "SELECT count(*) AS n FROM task")
    path = write(
        '[leak]\nhttp = "https://example.com/x"\nevery = "1h"\n'
        'headers = { X-Where = "${SCHEDULER_DATABASE_URL}" }\n'
    )
    result = _apply(cli, path)
    assert result.code == 2
    assert result.err.splitlines() == [
        "error: task 'leak': field 'headers': header X-Where: ${SCHEDULER_DATABASE_URL}"
        " is not resolved: only variables named SCHEDULER_SECRET_* are (export it as"
        " SCHEDULER_SECRET_SCHEDULER_DATABASE_URL)"
    ]
    assert "pw-of-applier" not in result.err
    assert query(database_url, "SELECT count(*) AS n FROM task") == before


def test_a_header_value_from_a_reference_is_shown_masked_to_every_reader(cli, write) -> None:
    # X-Team is no secret header by its name; its value came from a secret variable.
    path = write(
        '[hook]\nhttp = "https://example.com/x"\nevery = "1h"\n'
        'headers = { X-Team = "team-${SCHEDULER_SECRET_HOOK_TOKEN}", X-Plain = "ops" }\n'
    )
    assert _apply(cli, path).code == 0
    shown = cli("tasks", "show", "hook", "--json").json()
    assert shown["headers"] == {"X-Team": "***", "X-Plain": "ops"}
    assert "s3cret-token" not in cli("tasks", "show", "hook").out
    assert "s3cret-token" not in cli("tasks", "list", "--json").out
    revealed = cli("tasks", "show", "hook", "--json", "--show-secrets").json()
    assert revealed["headers"]["X-Team"] == "team-s3cret-token"


def test_the_files_source_key_makes_one_source_from_every_checkout(cli, tmp_path, client) -> None:
    # On 646db2b the source was the file's absolute path: the same file applied from another
    # checkout or CI workspace was refused after its first edit, --adopt too, with the advice
    # "rename it" (issue 29).
    text = 'source = "platform/tasks"\n\n[x]\ncommand = "true"\nevery = "1h"\n'
    for checkout, every in (("ci-1", "1h"), ("ci-2", "2h")):
        (tmp_path / checkout).mkdir()
        path = tmp_path / checkout / "tasks.toml"
        path.write_text(text.replace('"1h"', f'"{every}"'))
        result = cli("tasks", "apply", "-f", str(path))
        assert result.code == 0, result.err
        assert result.err == ""  # the file names its source: no warning
    task = client.get_task("x")
    assert (task.source, task.spec.every.total_seconds()) == ("platform/tasks", 7200)
    exported = cli("tasks", "export", "--source", "platform/tasks").out
    assert exported.startswith('source = "platform/tasks"\n')
    clash = cli("tasks", "apply", "-f", str(path), "--source", "other")
    assert clash.code == 2
    assert "source = 'platform/tasks' and --source says 'other'" in clash.err


def test_without_a_source_the_files_name_is_recorded_with_a_warning(cli, tmp_path, client):
    for checkout in ("a", "b"):
        (tmp_path / checkout).mkdir()
        path = tmp_path / checkout / "jobs.toml"
        every = "1h" if checkout == "a" else "3h"
        path.write_text(f'[y]\ncommand = "true"\nevery = "{every}"\n')
        result = cli("tasks", "apply", "-f", str(path))
        assert result.code == 0, result.err
        assert result.err.startswith("warning: no source")
        assert "'jobs.toml'" in result.err
    assert client.get_task("y").source == "jobs.toml"
    assert client.get_task("y").spec.every.total_seconds() == 3 * 3600


def test_adopt_takes_over_a_task_of_another_source(cli, write, client) -> None:
    first = cli(
        "tasks", "apply", "-f", write('[z]\ncommand = "true"\nevery = "1h"\n'), "--source", "old"
    )
    assert first.code == 0, first.err
    changed = write('[z]\ncommand = "true"\nevery = "2h"\n', "new.toml")
    refused = cli("tasks", "apply", "-f", changed, "--source", "new")
    assert refused.code == 2
    assert refused.err == (
        "error: task 'z' was made by source 'old'; --adopt takes it over for 'new', or rename it"
        " in the file\n"
    )
    adopted = cli("tasks", "apply", "-f", changed, "--source", "new", "--adopt")
    assert adopted.code == 0, adopted.err
    assert client.get_task("z").source == "new"
