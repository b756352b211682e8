"""The web console (`scheduler-daemon console`, the `console` extra, ADR 0018): routes and
templates over the same Python API the CLI uses; a process of its own, never inside the daemon.

Its parts, one job each: who may act and the CSRF check (guard.py), what each page reads
(pages.py), the actions (actions.py), the run chart's geometry (chart.py), and the application
with its routes (app.py).
"""
