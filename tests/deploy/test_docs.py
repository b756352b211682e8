"""The operator documents say what the code does: the configuration reference lists exactly the
options of the commands (click introspection), the README and CLI tables agree with them, every
SCHEDULER_* variable the package names is documented, and the SQL and rules shown in the docs are
the ones the command and deploy/ ship."""

import dataclasses
import math
import re
from datetime import timedelta
from pathlib import Path

import click
import pytest

from scheduler_daemon.cli import cli
from scheduler_daemon.domain import timing
from scheduler_daemon.domain.duration import parse_duration
from scheduler_daemon.executors.base import STOP_GRACE_SECONDS
from scheduler_daemon.settings import PASS_BLOCK_BOUND, SHUTDOWN_MARGIN, DaemonSettings
from scheduler_daemon.storage import roles
from scheduler_daemon.storage.database import KEEPALIVES, Limits
from tests.deploy.options import Option, _options, global_options, run_options

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "configuration.md"
FLAG = re.compile(r"--[a-z][a-z-]*")
VARIABLE = re.compile(r"\bSCHEDULER_[A-Z_]+\b")


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _table(text: str) -> list[list[str]]:
    """The rows of the first table in `text`, cells stripped, header and rule dropped."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[2:]


def _documented(path: Path, heading: str) -> set[Option]:
    """Rows `| flag | variable | default | meaning |` as Options."""
    found = set()
    for flag, variable, default, *_ in _table(_section(path, heading)):
        variables = VARIABLE.findall(variable)
        found.add(
            Option(
                frozenset(FLAG.findall(flag)),
                variables[0] if variables else None,
                default.replace("`", ""),
            )
        )
    return found


def _by_flags(options: set[Option] | list[Option]) -> dict[frozenset[str], Option]:
    return {o.flags: o for o in options}


# After merging ops-daemon, --http-port, --http-host and --max-failed-passes exist; until then the
# comparisons below fail on those three rows only, by design.
@pytest.mark.parametrize(
    ("heading", "options"),
    [
        ("## Global options", global_options),
        ("## `run`", run_options),
        ("## `recover`", lambda: _options(cli.commands["recover"])),
    ],
)
def test_the_configuration_reference_lists_exactly_the_commands_settings(heading, options) -> None:
    """Settings are the options with a variable (`recover --dry-run` is not one)."""
    documented = _by_flags(_documented(REFERENCE, heading))
    actual = _by_flags([o for o in options() if o.variable])
    assert sorted(map(sorted, documented.keys() - actual.keys())) == [], "documented, not in CLI"
    assert sorted(map(sorted, actual.keys() - documented.keys())) == [], "in the CLI, undocumented"
    for flags, option in actual.items():
        assert documented[flags] == option, sorted(flags)


def test_every_variable_the_package_names_is_in_the_reference() -> None:
    named = {
        v
        for p in (ROOT / "scheduler_daemon").rglob("*.py")
        for v in VARIABLE.findall(p.read_text())
    }
    assert named - set(VARIABLE.findall(REFERENCE.read_text())) == set()


def _rows_agree_with_the_cli(path: Path, heading: str) -> set[str]:
    """Each row's flags exist and carry the row's variables; returns the flags documented."""
    actual = {flag: o for o in (*global_options(), *run_options()) for flag in o.flags}
    seen = set()
    for flag_cell, variable_cell, *_ in _table(_section(path, heading)):
        variables = set(VARIABLE.findall(variable_cell))
        for flag in FLAG.findall(flag_cell):
            assert flag in actual, f"{path.name} documents {flag}, which `run` does not have"
            assert actual[flag].variable in variables, (path.name, flag, variables)
            seen.add(flag)
    return seen


def test_the_readme_configuration_table_lists_every_run_option_correctly() -> None:
    seen = _rows_agree_with_the_cli(ROOT / "README.md", "## Configuration")
    every = {f for o in (*global_options(), *run_options()) for f in o.flags}
    assert every - seen == set(), "the README's table misses these"


def test_the_cli_reference_run_table_agrees_with_the_cli() -> None:
    _rows_agree_with_the_cli(ROOT / "docs" / "cli.md", "## run")


def test_the_permissions_sql_in_deploy_md_is_what_db_roles_prints() -> None:
    section = _section(ROOT / "docs" / "operators" / "deploy.md", "## Permissions")
    blocks = re.findall(r"```sql\n(.*?)```", section, re.S)
    names = roles.RoleNames()
    assert blocks == [roles.script(roles.creation(names)), roles.script(roles.grants(names))]


RULES = ROOT / "deploy" / "prometheus" / "scheduler-daemon.rules.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"
METRIC = re.compile(r"\bscheduler_daemon_[a-z_]+")


def documented_metrics() -> dict[str, str]:
    """name → type, from the table in docs/operations.md#metrics."""
    return {name.strip("`"): kind for name, kind, *_ in _table(_section(OPERATIONS, "### Metrics"))}


def test_the_alert_rules_in_the_docs_are_the_shipped_file() -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", _section(OPERATIONS, "### Alert rules"), re.S)
    assert block == RULES.read_text()


def test_every_alert_rule_is_complete_and_uses_documented_metrics() -> None:
    import yaml

    metrics = documented_metrics()
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert [g["name"] for g in groups] == ["scheduler-daemon", "scheduler-daemon-tasks"]
    rules = [rule for group in groups for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        for used in METRIC.findall(rule["expr"]):
            base = re.sub(r"_(bucket|sum|count)$", "", used)
            assert base in metrics, f"{rule['alert']} uses {used}, not in docs/operations.md"
            if base != used:
                assert metrics[base] == "histogram", used


# -- defaults: the CLI reads them from DaemonSettings, the docs quote them -----------------------
def _settings_options() -> list[click.Option]:
    """The `run` and `recover` options that set a DaemonSettings field."""
    fields = {f.name for f in dataclasses.fields(DaemonSettings)}
    return [
        p
        for name in ("run", "recover")
        for p in cli.commands[name].params
        if isinstance(p, click.Option) and p.name in fields
    ]


def test_every_run_and_recover_default_is_the_daemon_settings_default() -> None:
    options = _settings_options()
    assert len(options) > 10, "the options were not found; the test would pass vacuously"
    for option in options:
        default = option.type_cast_value(click.Context(cli), option.get_default(click.Context(cli)))
        assert default == getattr(DaemonSettings, option.name), option.name


def _default_cell(cell: str) -> str:
    """`1s` → 1s, `0 (off)` → 0: the value a table's default column shows."""
    return cell.replace("`", "").split(" (")[0].strip()


@pytest.mark.parametrize(
    ("path", "heading"),
    [(ROOT / "README.md", "## Configuration"), (ROOT / "docs" / "cli.md", "## run")],
)
def test_the_readme_and_cli_tables_show_the_commands_defaults(path, heading) -> None:
    actual = {flag: o for o in (*global_options(), *run_options()) for flag in o.flags}
    checked = 0
    for flag_cell, _variable, default, *_ in _table(_section(path, heading)):
        flags = FLAG.findall(flag_cell)
        option = actual.get(flags[0]) if len(flags) == 1 else None
        if option is None or option.default == "unset":
            continue  # a row of two options, or one whose default is described in words
        assert _default_cell(default) == option.default, (path.name, flags[0])
        checked += 1
    assert checked >= 10, "too few rows were compared; the table layout changed"


DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file()),
]


def _prose(path: Path) -> str:
    """The text with comment markers dropped and line breaks joined, so a phrase that wraps (in
    Markdown or in a `#` comment of a unit or manifest) reads as one line."""
    lines = path.read_text().splitlines()
    if path.suffix != ".md":
        lines = [re.sub(r"^\s*#\s?", "", line) for line in lines]
    return re.sub(r"\s+", " ", " ".join(lines))


def _quoted_defaults() -> list[tuple[str, tuple[float, ...]]]:
    """(pattern, what each of its groups must read): every derived or default timing value the
    documents quote as a number, computed from DaemonSettings and the constants it relies on."""
    s = DaemonSettings()
    ttl = s.lease_ttl
    trust = ttl - timing.trust_margin(ttl)
    # Survives a stall of D when TTL - TTL/5 - TTL/3 > D: TTL above this many times D.
    stall_factor = math.ceil(10 * ttl / (trust - s.renew_interval)) / 10
    limits = Limits()
    sec = timedelta.total_seconds
    return [
        (
            r"default (\d+) \+ (\d+) \+ (\d+) = (\d+) s",
            tuple(map(sec, (ttl, s.lease_grace, s.reconcile_interval, s.takeover_bound))),
        ),
        (r"renewed every TTL/3 \((\d+) s\)", (sec(s.renew_interval),)),
        (r"TTL \N{MINUS SIGN} TTL/5 \((\d+(?:\.\d+)?) s", (sec(trust),)),
        (
            r"TTL \+ grace \+ reconcile interval(?: of its last renewal)? \((\d+) s",
            (sec(s.takeover_bound),),
        ),
        (r"\| every TTL/3 \| (\d+) s \|", (sec(s.renew_interval),)),
        (
            r"\| last renewal sent \+ TTL \N{MINUS SIGN} TTL/5 \| (\d+(?:\.\d+)?) s \|",
            (sec(trust),),
        ),
        (
            r"rides out a database outage of at least (\d+(?:\.\d+)?) s",
            (sec(trust - s.renew_interval),),
        ),
        # A claim expires a lease TTL after it is made: the launcher claims with lease_ttl.
        (r"\| TTL \| (\d+) s \|", (sec(s.lease_ttl),)),
        (r"\| TTL \+ grace \| (\d+) s \|", (sec(s.restart_quiet),)),
        (r"\| TTL \+ grace \+ reconcile interval \| (\d+) s \|", (sec(s.takeover_bound),)),
        (
            r"With the defaults: renewals every (\d+) s, a job killed (\d+(?:\.\d+)?) s after "
            r"the last good renewal was sent, a lease that ends (\d+) s or more after it, a "
            r"takeover no sooner than (\d+) s after it",
            tuple(map(sec, (s.renew_interval, trust, ttl, s.restart_quiet))),
        ),
        (r"`--lease-ttl` above (\d+\.\d+) \N{MULTIPLICATION SIGN} D", (stall_factor,)),
        (r"before SIGKILL \((\d+) s by default", (sec(s.stop_timeout),)),
        (r"drain\S*(?: \([^)]*\))? (?:\+|plus) (\d+) ?s\b", (sec(SHUTDOWN_MARGIN),)),
        (r"(\d+) s to record outcomes", (sec(SHUTDOWN_MARGIN),)),
        (r"up to (\d+) s more", (sec(SHUTDOWN_MARGIN),)),
        (r"plus (\d+) s must fit", (sec(SHUTDOWN_MARGIN),)),
        (r"re-runs them \((\d+) s\)", (sec(SHUTDOWN_MARGIN),)),
        (r"poll[- ]interval`?(?: \([^)]*\))? (?:\+|plus) (\d+) ?s\b", (sec(PASS_BLOCK_BOUND),)),
        (r"poll-interval \+ (\d+)s \((\d+)s\)", (sec(PASS_BLOCK_BOUND), sec(s.stall_timeout))),
        (r"(\d+) s `?statement[_ ]timeout", (sec(parse_duration(limits.statement_timeout)),)),
        (r"`statement_timeout` (\d+) s", (sec(parse_duration(limits.statement_timeout)),)),
        (r"`lock_timeout` (\d+) s", (sec(parse_duration(limits.lock_timeout)),)),
        (
            r"(\d+) s `?(?:tcp_user_timeout|TCP user timeout)",
            (KEEPALIVES["tcp_user_timeout"] / 1000,),
        ),
        (r"SIGKILL after (\d+) s", (STOP_GRACE_SECONDS,)),
    ]


@pytest.mark.parametrize(("pattern", "expected"), _quoted_defaults())
def test_every_timing_value_the_docs_quote_is_what_the_settings_compute(pattern, expected) -> None:
    """Each phrase must occur (a rewording updates this list), and wherever it occurs its numbers
    are the ones DaemonSettings gives."""
    found = [
        (path.relative_to(ROOT).as_posix(), tuple(float(g) for g in match.groups()))
        for path in DOCUMENTS
        for match in re.finditer(pattern, _prose(path), re.IGNORECASE)
    ]
    assert found, f"no document quotes {pattern!r} any more; update or drop the pattern"
    assert [(where, got) for where, got in found if got != tuple(expected)] == []


_UNIT_SECONDS = {"s": 1, "m": 60, "minute": 60, "minutes": 60}


def test_every_default_quoted_beside_its_flag_is_the_settings_default() -> None:
    """`--lease-ttl` (15 s), `--instance-expiry` (10 minutes by default), `--max-failed-passes`
    (10): a value alone in parentheses right after a flag is that flag's default."""
    checked = 0
    for option in _settings_options():
        value = getattr(DaemonSettings, option.name)
        if not isinstance(value, int | timedelta) or isinstance(value, bool):
            continue
        (flag,) = (f for f in option.opts if f.startswith("--"))
        pattern = rf"`?{flag}`? \((\d+)(?: ?(s|m|minutes?))?(?:\)|,| by default)"
        for path in DOCUMENTS:
            for number, unit in re.findall(pattern, _prose(path)):
                where = (path.relative_to(ROOT).as_posix(), flag)
                if isinstance(value, timedelta):
                    assert unit, where
                    assert int(number) * _UNIT_SECONDS[unit] == value.total_seconds(), where
                else:
                    assert (int(number), unit) == (value, ""), where
                checked += 1
    assert checked >= 10, "too few quotes were found; the pattern is wrong"
