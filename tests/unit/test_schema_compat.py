"""The compatibility judgement (ADR 0002): which build works with which schema."""

from scheduler_daemon.domain.schema_compat import Build, Record, Step

OLD = Build((Step("0001", "baseline"), Step("0002", "baseline")))
NEW = Build((*OLD.steps, Step("0003", "expand"), Step("0004", "contract")))


def test_a_build_needs_its_last_non_contract_step() -> None:
    assert (OLD.needs, NEW.needs) == ("0002", "0003")
    assert NEW.expand_target("0002") == "0003"
    assert NEW.expand_target("0003") is None


def test_a_schema_without_a_step_the_build_needs_asks_for_migrate() -> None:
    verdict = NEW.judge("0002", Record("0002", "0002"))
    assert verdict.kind == "behind"
    assert verdict.message.endswith("run `scheduler-daemon migrate`")
    assert NEW.judge(None, None).kind == "behind"


def test_a_pending_contract_step_leaves_both_builds_working() -> None:
    record = Record("0003", "0002", ("0004",))
    assert NEW.judge("0003", record).ok
    assert OLD.judge("0003", record).ok  # a revision it does not know, recorded as compatible


def test_after_the_contract_only_builds_that_know_it_work() -> None:
    record = Record("0004", "0004")
    assert NEW.judge("0004", record).ok
    verdict = OLD.judge("0004", record)
    assert verdict.kind == "too_new"
    assert "works with builds from schema 0004 on; this build is at schema 0002" in verdict.message


def test_an_unknown_revision_without_a_record_is_too_new() -> None:
    assert OLD.judge("0009", None).kind == "too_new"


def test_a_contract_raises_the_oldest_build_an_expand_step_leaves_it() -> None:
    assert [NEW.oldest_build_at(r) for r in ("0001", "0002", "0003", "0004")] == [
        "0001",
        "0002",
        "0002",
        "0004",
    ]
    assert NEW.works_after("0002", "0002")
    assert not NEW.works_after("0002", "0004")
    assert NEW.works_after("0099", "0004")  # a build this one does not know is newer


def test_the_steps_to_a_target_are_the_pending_ones_up_to_it() -> None:
    later = Build((*NEW.steps, Step("0005", "expand"), Step("0006", "contract")))
    assert [s.revision for s in later.steps_to("0002", later.needs)] == ["0003", "0004", "0005"]
    assert later.needs == "0005"
    assert later.steps_to("0005", later.needs) == ()
    assert [s.revision for s in later.steps_to(None, "0002")] == ["0001", "0002"]
