"""`HeldRuns`, the runs one process holds a lease on: which leases it renews, and iteration
that stays safe while the loop and the lease keeper thread change the set."""

from scheduler_daemon.domain.held import HeldRun, HeldRuns


def _run(run_id: int, token: int = 1, job: object = None, **kw: object) -> HeldRun:
    return HeldRun(
        run_id=run_id,
        token=token,
        occurrence_id=100 + run_id,
        task_id=7,
        job=job,
        **kw,  # type: ignore[arg-type]
    )


def test_an_empty_set_holds_nothing_and_renews_nothing() -> None:
    held = HeldRuns()
    assert (len(held), list(held), held.leases(), held.get(1)) == (0, [], [], None)


def test_added_runs_are_found_by_id_and_removed_ones_are_gone() -> None:
    held = HeldRuns()
    a, b = _run(1), _run(2)
    held.add(a)
    held.add(b)
    assert len(held) == 2
    assert held.get(1) is a
    assert held.get(2) is b
    held.remove(1)
    assert (len(held), held.get(1), list(held)) == (1, None, [b])


def test_removing_a_run_that_is_not_held_is_a_no_op() -> None:
    # The completer and the lease keeper may both drop a run that was fenced meanwhile.
    held = HeldRuns()
    held.add(_run(1))
    held.remove(2)
    held.remove(1)
    held.remove(1)
    assert len(held) == 0


def test_adding_a_run_id_again_replaces_the_held_run() -> None:
    held = HeldRuns()
    held.add(_run(1, token=1))
    held.add(_run(1, token=2))
    assert len(held) == 1
    assert held.leases() == [(1, 101, 2)]  # (run, occurrence, token)


def test_leases_renew_every_held_run_except_the_fenced_and_the_completing() -> None:
    held = HeldRuns()
    held.add(_run(1, token=5))
    held.add(_run(2, fenced=True))  # lost to a takeover: renewing it would be refused anyway
    held.add(_run(3, completing=True))  # its outcome is being written in its own transaction
    held.add(_run(4, token=9, cancel_requested=True))  # asked to stop: keeps its lease meanwhile
    assert sorted(held.leases()) == [(1, 101, 5), (4, 104, 9)]


def test_a_lease_reflects_a_run_fenced_after_it_was_added() -> None:
    held = HeldRuns()
    run = _run(1)
    held.add(run)
    run.fenced = True
    assert held.leases() == []


class _Job:
    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def extend(self, deadline: float) -> None:
        self.deadlines.append(deadline)


def test_a_renewal_extends_only_its_own_runs_trust_deadline_and_never_moves_it_back() -> None:
    a, b = _run(1, job=_Job()), _run(2, job=_Job())
    a.renewed(10.0)
    assert (a.trusted_until, a.job.deadlines) == (10.0, [10.0])
    assert (b.trusted_until, b.job.deadlines) == (0.0, [])  # b's row was held: b's runs on
    a.renewed(9.0)  # an older statement's answer moves nothing
    a.renewed(12.0)
    assert (a.trusted_until, a.job.deadlines) == (12.0, [10.0, 12.0])


def test_iteration_is_a_snapshot_that_a_concurrent_add_or_remove_does_not_break() -> None:
    # Would fail against an __iter__ that returned the live dict's iterator: the lease keeper
    # thread adding or removing mid-iteration raises "dictionary changed size during iteration".
    held = HeldRuns()
    a, b = _run(1), _run(2)
    held.add(a)
    held.add(b)
    iterator = iter(held)
    held.add(_run(3))
    held.remove(1)
    assert list(iterator) == [a, b]  # what was held when iteration began
    assert sorted(r.run_id for r in held) == [2, 3]
