"""The geometry of a task page's run chart (server-rendered SVG, no script): one bar per run
for its duration and a line for its start lag (started minus scheduled), oldest on the left."""

from dataclasses import dataclass
from datetime import datetime

WIDTH, HEIGHT, PAD = 720, 200, 30


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    lag_points: str  # an SVG polyline's points
    max_duration: float
    max_lag: float
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


@dataclass(frozen=True)
class Point:
    run_id: int
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None


def chart(points: list[Point]) -> Chart | None:
    """The chart of `points` (newest first, as history reads), None when no run started."""
    if not points:
        return None
    ordered = list(reversed(points))
    durations = [
        (p.finished_at - p.started_at).total_seconds() if p.finished_at else 0.0 for p in ordered
    ]
    lags = [max((p.started_at - p.scheduled_for).total_seconds(), 0.0) for p in ordered]
    top_d, top_l = max(*durations, 0.001), max(*lags, 0.001)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    step = inner_w / len(ordered)
    bars, lag_xy = [], []
    for i, (p, d, lag) in enumerate(zip(ordered, durations, lags, strict=True)):
        h = inner_h * d / top_d
        x = PAD + i * step
        bars.append(
            Bar(
                round(x + step * 0.1, 1),
                round(PAD + inner_h - h, 1),
                round(max(step * 0.8, 1.0), 1),
                round(h, 1),
                f"run {p.run_id}: {d:.3f} s, started {lag:.3f} s late",
            )
        )
        lag_xy.append(f"{x + step / 2:.1f},{PAD + inner_h - inner_h * lag / top_l:.1f}")
    return Chart(bars, " ".join(lag_xy), round(top_d, 3), round(top_l, 3))
