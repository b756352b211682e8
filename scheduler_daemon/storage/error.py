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


class ContractBlocked(StorageError):
    """`migrate --contract` found registered instances of a build it would break (exit code 6)."""
