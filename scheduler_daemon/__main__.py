"""`python -m scheduler_daemon` runs the command line."""

from scheduler_daemon.cli import main

main()
