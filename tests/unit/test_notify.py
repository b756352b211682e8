"""Reading the notify variables: abstract names, whose watchdog it is, and removing them."""

import os
from datetime import timedelta

from scheduler_daemon.runtime.notify import Notifier, socket_address


def test_an_at_sign_names_an_abstract_socket() -> None:
    assert socket_address("@scheduler") == "\0scheduler"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


def test_the_variables_are_read_once_and_removed_so_jobs_do_not_inherit_them() -> None:
    env = {"NOTIFY_SOCKET": "@n", "WATCHDOG_USEC": "120000000", "PATH": "/bin"}
    notifier = Notifier.from_environment(env)
    assert notifier.address == "\0n"
    assert notifier.watchdog == timedelta(seconds=120)
    assert env == {"PATH": "/bin"}


def test_a_watchdog_meant_for_another_process_is_ignored() -> None:
    env = {"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier.from_environment(env).watchdog is None
    env = {"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier.from_environment(env).watchdog == timedelta(seconds=120)


def test_outside_systemd_nothing_is_sent() -> None:
    notifier = Notifier.from_environment({})
    assert notifier.send("READY=1") is False
    notifier.progress()  # no watchdog: nothing to do, no error
