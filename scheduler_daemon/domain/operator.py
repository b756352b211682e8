"""Who asks for an action and from where: what `operator_action` records beside the action,
in the action's own transaction (ADR 0018)."""

from dataclasses import dataclass

from scheduler_daemon.domain.status import ActionSource, OperatorAction


@dataclass(frozen=True)
class Actor:
    """An operator (`user@host`, `console-token@ADDRESS`, a proxy's user) and the source of the
    action (`cli` or `console`); refused when either is unknown to the table's checks."""

    name: str
    source: str

    def __post_init__(self) -> None:
        if self.source not in set(ActionSource):
            raise ValueError(f"unknown operator action source {self.source!r}")


def check_action(action: str) -> None:
    if action not in set(OperatorAction):
        raise ValueError(f"unknown operator action {action!r}")
