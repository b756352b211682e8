"""scheduler-daemon: durable cron for a fleet, coordinated through PostgreSQL alone."""

__version__ = "0.1.0"
