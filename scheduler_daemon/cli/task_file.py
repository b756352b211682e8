"""`scheduler-daemon tasks apply` and `tasks export`: tasks as a TOML file kept in git (parsing
and printing only; domain/task_file.py reads and writes the format, declarative.py applies it)."""

import os
import sys
from pathlib import Path

import click

from scheduler_daemon.cli.base import client_for, emit, json_option, who
from scheduler_daemon.cli.tasks import tasks
from scheduler_daemon.domain import limit, task_file
from scheduler_daemon.domain.task import InvalidTask


@tasks.command("apply")
@click.option(
    "-f", "--file", "path", required=True, metavar="FILE", help="The task file (- : stdin)."
)
@click.option(
    "--source",
    help="The name recorded on the tasks this file creates, when the file has no `source = ...`. "
    "Default: the file's name without its directories.",
)
@click.option("--prune", is_flag=True, help="Delete tasks of this source the file no longer names.")
@click.option(
    "--adopt", is_flag=True, help="Take over tasks the file names made by hand or another source."
)
@click.option("--dry-run", is_flag=True, help="Print the diff only; change nothing.")
@json_option
@click.pass_context
def tasks_apply(
    ctx: click.Context, path: str, *, source: str | None, prune: bool, adopt: bool, dry_run: bool
) -> None:
    """Create and update tasks to match a TOML file (one table per task, the fields of `tasks
    add`), in one transaction, and print the diff: `+ added`, `~ changed`, `- would delete`
    (with --prune: `- deleted`). A bad file changes nothing. Header values may hold ${VAR}."""
    from scheduler_daemon.declarative import apply

    most = limit.MAX_TASK_FILE_BYTES + 1  # one byte more tells a file that is too large
    if path == "-":
        data = sys.stdin.buffer.read(most)
    else:
        try:
            with Path(path).open("rb") as stream:
                data = stream.read(most)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise InvalidTask(f"cannot read {path}: {getattr(exc, 'strerror', exc)}") from exc
    if source is not None:
        limit.name("--source", source, most=limit.MAX_SOURCE_LENGTH)
    declared, specs = task_file.read(task_file.decode(data), os.environ)
    source = _source(path, declared=declared, given=source)
    changes = apply(
        client_for(ctx),
        specs,
        source=source,
        prune=prune,
        adopt=adopt,
        dry_run=dry_run,
        requested_by=who(),
    )
    lines = [c.text() for c in changes]
    summary = f"{len(specs)} task(s) in the file, {len(changes)} change(s)" + (
        " (dry run: nothing written)" if dry_run else ""
    )
    emit(
        ctx,
        {
            "source": source,
            "dry_run": dry_run,
            "changes": [
                {"change": c.mark, "name": c.name, "fields": list(c.fields), "note": c.note}
                for c in changes
            ],
        },
        "\n".join([*lines, summary]),
    )


def _source(path: str, *, declared: str | None, given: str | None) -> str:
    """The file's `source = ...`, else --source, else the file's name without directories (the
    same from every checkout and CI workspace), said in a warning."""
    if declared is not None and given is not None and declared != given:
        raise InvalidTask(
            f"the file says source = {declared!r} and --source says {given!r}: drop one"
        )
    if declared is not None or given is not None:
        return declared or given or ""
    if path == "-":
        raise InvalidTask('-f - (stdin) needs source = "NAME" in the file, or --source NAME')
    name = Path(path).name
    click.echo(
        f'warning: no source = "..." in the file and no --source: recording the file\'s name, '
        f"{name!r}; a file of the same name elsewhere is the same source",
        err=True,
    )
    return name


MASKED_EXPORT = (
    "# Exported by a database role that may not read secrets (the reader, ADR 0031): every\n"
    "# header value, and each URL past its host, is *** as the database masked it, not the\n"
    "# stored value. `tasks apply` of this file keeps the stored value for each.\n"
)


@tasks.command("export")
@click.argument("names", nargs=-1, metavar="[TASK]...")
@click.option("--source", help="Only the tasks an apply of this source created.")
@click.option(
    "--include-secrets",
    is_flag=True,
    help="Write secret header values and URL passwords instead of *** (or ${VAR} references).",
)
def tasks_export(names: tuple[str, ...], source: str | None, include_secrets: bool) -> None:
    """Write live tasks in the format `tasks apply` reads, so `export | apply` changes nothing.
    Secret header values are written as their ${VAR} reference, else as ***, which apply reads
    as "keep the stored value". A role that may not read secrets (the reader) exports them as
    the database masks them, said in a comment first; `--include-secrets` is refused."""
    ctx = click.get_current_context()
    records, readable = client_for(ctx).export_tasks()
    if include_secrets and not readable:
        raise click.UsageError(
            "--include-secrets: this database role may not read the tasks' secrets (the "
            "reader role, ADR 0031): export as the operator role, or without the option"
        )
    if names:
        known = {r.name for r in records}
        missing = [n for n in names if n not in known]
        if missing:
            raise InvalidTask(f"unknown task '{missing[0]}'")
        records = [r for r in records if r.name in names]
    if source is not None:
        records = [r for r in records if r.source == source]
    if not readable:
        click.echo(MASKED_EXPORT, nl=False)
    click.echo(
        task_file.render(
            [task_file.exported(r) for r in records],
            include_secrets=include_secrets,
            source=source,
        ),
        nl=False,
    )
