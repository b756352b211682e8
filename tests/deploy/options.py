"""The options of `scheduler-daemon run` and the global ones, read from the click commands."""

from dataclasses import dataclass

import click

from scheduler_daemon.cli import cli


@dataclass(frozen=True)
class Option:
    flags: frozenset[str]  # e.g. {"--listen", "--no-listen"}
    variable: str | None
    default: str  # as the documentation prints it


def _default(option: click.Option) -> str:
    if isinstance(option.show_default, str):
        return option.show_default
    if option.is_flag and option.secondary_opts:
        return option.opts[0] if option.default else option.secondary_opts[0]
    if not isinstance(option.default, str | int | float):  # None, or click's UNSET sentinel
        return "unset"
    return str(option.default)


def _options(command: click.Command) -> list[Option]:
    found = []
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden or param.name in ("help", "version"):
            continue
        variable = param.envvar if isinstance(param.envvar, str) else None
        flags = frozenset(f for f in (*param.opts, *param.secondary_opts) if f.startswith("--"))
        found.append(Option(flags, variable, _default(param)))
    return found


def global_options() -> list[Option]:
    return _options(cli)


def run_options() -> list[Option]:
    return _options(cli.commands["run"])


def variables() -> set[str]:
    """Every SCHEDULER_* variable the daemon's command line reads."""
    return {o.variable for o in (*global_options(), *run_options()) if o.variable}
