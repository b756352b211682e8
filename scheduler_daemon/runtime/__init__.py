"""The daemon's wing (`scheduler-daemon run`): the composition root, the loop and its pacing,
registration, the drain, supervision, and the daemon-side plumbing (the HTTP endpoint, health,
metrics, systemd notifications). The CLI starts it; nothing below it imports it."""
