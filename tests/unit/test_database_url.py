"""How a database URL is read for messages (`describe_server`) and rewritten to find a server
that accepts writes (`read_write`): both take the URL form and the keyword (conninfo) form,
multi-host included, and never lose or change the password."""

import pytest
from psycopg.conninfo import conninfo_to_dict

from scheduler_daemon.storage.database import (
    TARGET_SESSION_ATTRS_ENV,
    UNPARSEABLE,
    describe_server,
    read_write,
)

PASSWORD = "p@ss w'ord"  # characters both forms must quote


@pytest.fixture(autouse=True)
def _no_target_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TARGET_SESSION_ATTRS_ENV, raising=False)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p%40ss%20w%27ord@h1:5440,h2:5441/db?sslmode=prefer&connect_timeout=3",
        "host=h1,h2 port=5440,5441 dbname=db user=u password='p@ss w\\'ord' sslmode=prefer "
        "connect_timeout=3",
    ],
    ids=["url", "conninfo"],
)
def test_read_write_is_added_when_the_url_sets_none_and_everything_else_is_kept(url) -> None:
    rewritten = conninfo_to_dict(read_write(url))

    assert rewritten == {**conninfo_to_dict(url), "target_session_attrs": "read-write"}
    assert rewritten["password"] == PASSWORD
    assert (rewritten["host"], rewritten["port"]) == ("h1,h2", "5440,5441")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:secret@h1:5440,h2:5441/db?target_session_attrs=any",
        "host=h1,h2 port=5440,5441 dbname=db password=secret target_session_attrs=prefer-standby",
    ],
)
def test_a_url_that_sets_target_session_attrs_is_left_as_it_is(url) -> None:
    assert read_write(url) == url


def test_pgtargetsessionattrs_in_the_environment_is_respected(monkeypatch) -> None:
    monkeypatch.setenv(TARGET_SESSION_ATTRS_ENV, "any")
    url = "postgresql://u@h1,h2/db"

    assert read_write(url) == url


def test_a_url_libpq_cannot_read_is_returned_as_it_is() -> None:
    url = "postgresql://u:s3cr et@h/db"

    assert read_write(url) == url


@pytest.mark.parametrize(
    ("url", "server"),
    [
        ("postgresql://u:pw@127.0.0.1:1/app", "127.0.0.1:1/app"),
        ("postgresql://u:pw@h1:5440,h2:5441/db", "h1:5440,h2:5441/db"),
        ("postgresql://u@h1,h2:5441/db", "h1:5432,h2:5441/db"),
        ("postgresql://u@h1,h2/db", "h1:5432,h2:5432/db"),
        ("host=h1,h2 port=6432 dbname=db password=pw", "h1:6432,h2:6432/db"),
        ("host=h1,h2 port=5440,5441 dbname=db", "h1:5440,h2:5441/db"),
        ("postgresql://admin:s3cr@et@h1:1,h2:2/app", UNPARSEABLE),
    ],
)
def test_describe_server_names_each_host_with_its_port_and_never_the_password(url, server) -> None:
    assert describe_server(url) == server
