"""The `scheduler-daemon` command line: parsing and printing only; Client and below do the work.

The entry point turns every expected failure into one line on stderr and a documented exit code.
"""

import sys
from typing import NoReturn

import click
import psycopg

from scheduler_daemon.cli import (  # noqa: F401 - registers the commands
    actions,
    audit,
    backfill,
    calendars,
    console,
    fleet,
    health,
    partitions,
    retention,
    roles,
    runs,
    task_file,
    task_next,
    tasks,
)
from scheduler_daemon.cli.base import (
    EXIT_BAD_INPUT,
    EXIT_CONTRACT_BLOCKED,
    EXIT_SCHEMA_BEHIND,
    EXIT_SCHEMA_SHAPE,
    EXIT_SCHEMA_TOO_NEW,
    EXIT_UNAVAILABLE,
    cli,
)
from scheduler_daemon.cli.output import printable
from scheduler_daemon.domain.argument import InvalidArgument
from scheduler_daemon.domain.limit import OutOfBounds
from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.task import InvalidTask
from scheduler_daemon.logconfig import scrub_text
from scheduler_daemon.settings import InvalidSettings
from scheduler_daemon.storage.database import first_line
from scheduler_daemon.storage.error import (
    Conflict,
    ContractBlocked,
    DatabaseUnavailable,
    NotFound,
    SchemaBehind,
    SchemaShapeDiffers,
    SchemaTooNew,
)

__all__ = ["cli", "main"]


def _naming_the_embedded_directory(message: str) -> str:
    """On the embedded server (the quick start's), how to recreate the database names its data
    directory; nothing else."""
    from scheduler_daemon import embedded
    from scheduler_daemon.domain.schema_compat import RECREATE_HOW

    used = embedded.in_use()
    if len(used) != 1:
        return message
    return message.replace(
        RECREATE_HOW, f"the embedded server's: `scheduler-daemon db stop`, then delete {used[0]}"
    )


def _fail(code: int, message: str) -> NoReturn:
    """One line, `error: ...`: a control character in the message (a name as given) is
    escaped, a line break included."""
    click.echo(f"error: {printable(scrub_text(message), keep=frozenset())}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every expected failure is one line on stderr and a documented exit code."""
    from scheduler_daemon.embedded import EmbeddedUnavailable

    try:
        code = cli.main(args=argv, prog_name="scheduler-daemon", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fail(130, "aborted")
    except click.UsageError as exc:
        _fail(EXIT_BAD_INPUT, exc.format_message().replace("\n", " "))
    except (
        InvalidTask,
        InvalidArgument,
        InvalidSettings,
        OutOfBounds,
        ScheduleError,
        Conflict,
        NotFound,
    ) as exc:
        _fail(EXIT_BAD_INPUT, str(exc))
    except RecursionError:  # input nested past what a recursive parser or printer takes
        _fail(EXIT_BAD_INPUT, "the input nests too deeply to be read (RecursionError)")
    except SchemaBehind as exc:
        _fail(EXIT_SCHEMA_BEHIND, str(exc))
    except SchemaTooNew as exc:
        _fail(EXIT_SCHEMA_TOO_NEW, str(exc))
    except SchemaShapeDiffers as exc:
        _fail(EXIT_SCHEMA_SHAPE, _naming_the_embedded_directory(str(exc)))
    except ContractBlocked as exc:
        _fail(EXIT_CONTRACT_BLOCKED, str(exc))
    except (DatabaseUnavailable, EmbeddedUnavailable) as exc:
        _fail(EXIT_UNAVAILABLE, str(exc))
    except psycopg.errors.UndefinedTable:
        _fail(
            EXIT_UNAVAILABLE,
            "the database has no scheduler-daemon schema: run `scheduler-daemon migrate`",
        )
    except psycopg.Error as exc:  # permissions, lock timeouts, the unforeseen: one line, no trace
        _fail(EXIT_UNAVAILABLE, f"database error: {first_line(exc)}")
