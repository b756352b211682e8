"""Typed errors the storage layer raises; each message is one line, without credentials."""

import psycopg

# Errors one unit of work may meet on a live connection and simply retry later: a row lock held
# past lock_timeout, a statement cancelled by its timeout, a deadlock, a serialization failure.
LOCK_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)

# Errors that say a unit's own values cannot be stored (SQLSTATE classes 22 and 23, and 54 such
# as a btree row over its size limit), or that psycopg could not send them: a poison row. The
# unit is isolated (written without what it carried, else its task parked); no other unit and no
# pass fails with it, and supervision never counts it.
UNSTORABLE_ERRORS: tuple[type[Exception], ...] = (
    psycopg.errors.DataError,
    psycopg.errors.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,
    UnicodeError,
)


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a database error; `22021` (character not in repertoire) for text psycopg
    could not encode, which the server would refuse with that code."""
    code = getattr(exc, "sqlstate", None)
    return code or ("22021" if isinstance(exc, UnicodeError) else "22000")


class StorageError(RuntimeError):
    """Base of every error the storage layer raises on purpose."""


class DatabaseUnavailable(StorageError):
    """The database cannot be reached (exit code 1 in the CLI)."""


class NotFound(StorageError):
    """The named task, run or occurrence does not exist."""


class Conflict(StorageError):
    """The change breaks a rule that depends on what is in the database (exit code 2)."""


class SchemaMismatch(StorageError):
    """This build cannot work with the database schema (ADR 0002)."""


class SchemaBehind(SchemaMismatch):
    """The schema lacks a step this build needs: run `migrate` (exit code 4)."""


class SchemaTooNew(SchemaMismatch):
    """The schema is past what this build can work with: upgrade the build (exit code 5)."""


class SchemaShapeDiffers(SchemaMismatch):
    """The schema is at a revision this build knows, but not of the shape this build knows for
    it (ADR 0027, "as built"): made by another unreleased build, or changed by hand. Neither
    `migrate` nor another start helps: recreate the database, or use the build that made it
    (exit code 12)."""


class ContractBlocked(StorageError):
    """`migrate --contract` found registered instances of a build it would break (exit code 6)."""


def about_the_row(exc: BaseException) -> bool:
    """Whether `exc` is about one unit's own values, not the database: a value the server
    refuses to store (UNSTORABLE_ERRORS), or any error this build's code raised reading or
    deciding on a row (a value written behind the checks at entry, by SQL or another build).
    Such a unit becomes its row's outcome and the pass goes on. Lock waits, lost connections,
    privileges and DatabaseUnavailable are not: those fail or retry the pass as before."""
    if isinstance(exc, UNSTORABLE_ERRORS):
        return True
    return isinstance(exc, Exception) and not isinstance(exc, psycopg.Error | StorageError)
