"""The compatibility judgement (ADR 0039): which build works with which schema."""

from scheduler_daemon.domain.schema_compat import Build, Record, Step, before_squash, judge_shape

OLD = Build((Step("0038", "baseline"), Step("0039", "baseline")))
NEW = Build((*OLD.steps, Step("0040", "expand"), Step("0041", "contract")))


def test_a_build_needs_its_last_non_contract_step() -> None:
    assert (OLD.needs, NEW.needs) == ("0039", "0040")
    assert NEW.expand_target("0039") == "0040"
    assert NEW.expand_target("0040") is None


def test_a_schema_without_a_step_the_build_needs_asks_for_migrate() -> None:
    verdict = NEW.judge("0039", Record("0039", "0039"))
    assert verdict.kind == "behind"
    assert verdict.message.endswith("run `scheduler-daemon migrate`")
    assert NEW.judge(None, None).kind == "behind"


def test_a_pending_contract_step_leaves_both_builds_working() -> None:
    record = Record("0040", "0039", ("0041",))
    assert NEW.judge("0040", record).ok
    assert OLD.judge("0040", record).ok  # a revision it does not know, recorded as compatible


def test_after_the_contract_only_builds_that_know_it_work() -> None:
    record = Record("0041", "0041")
    assert NEW.judge("0041", record).ok
    verdict = OLD.judge("0041", record)
    assert verdict.kind == "too_new"
    assert "works with builds from schema 0041 on; this build is at schema 0039" in verdict.message


def test_an_unknown_revision_without_a_record_is_too_new() -> None:
    assert OLD.judge("0049", None).kind == "too_new"


def test_a_contract_raises_the_oldest_build_an_expand_step_leaves_it() -> None:
    assert [NEW.oldest_build_at(r) for r in ("0038", "0039", "0040", "0041")] == [
        "0038",
        "0039",
        "0039",
        "0041",
    ]
    assert NEW.works_after("0039", "0039")
    assert not NEW.works_after("0039", "0041")
    assert NEW.works_after("0099", "0041")  # a build this one does not know is newer


def test_the_steps_to_a_target_are_the_pending_ones_up_to_it() -> None:
    later = Build((*NEW.steps, Step("0042", "expand"), Step("0043", "contract")))
    assert [s.revision for s in later.steps_to("0039", later.needs)] == ["0040", "0041", "0042"]
    assert later.needs == "0042"
    assert later.steps_to("0042", later.needs) == ()
    assert [s.revision for s in later.steps_to(None, "0039")] == ["0038", "0039"]


def test_an_instance_of_a_build_from_before_the_squash_is_older_than_every_build_after_it() -> None:
    """Catches a pre-squash id ('0019', '0037') read as an unknown, hence newer, build: such an
    instance would pass `migrate --contract`'s check and a registration beside the baseline."""
    assert before_squash("0019")
    assert before_squash("0037")
    assert not before_squash("0038")
    assert not before_squash("9001")
    assert not NEW.works_after("0019", "0038")
    assert not NEW.works_after("0037", "0041")
    assert NEW.works_after("0099", "0041")


def test_a_schema_from_before_the_squash_is_behind_and_names_the_way_to_the_baseline() -> None:
    """Catches a database at 0037 (its record says oldest build 0005) judged too new."""
    at_head = NEW.judge("0037", Record("0037", "0005"))
    assert at_head.kind == "behind"
    assert "run `scheduler-daemon migrate` with the fleet stopped" in at_head.message
    older = NEW.judge("0019", None)
    assert older.kind == "behind"
    assert older.message.endswith("after reaching 0037")


def test_a_schema_of_another_shape_than_recorded_or_known_is_judged_by_its_shape() -> None:
    # issue 47: a database at 0038 made by an earlier build records no shape, or another one.
    mine = "a" * 64
    assert judge_shape("0038", mine, mine) is None
    assert judge_shape("0038", mine, mine, live=mine) is None
    for recorded, shown in ((None, "none recorded"), ("b" * 64, "bbbbbbbbbbbb")):
        verdict = judge_shape("0038", mine, recorded, live=mine)
        assert verdict is not None
        assert (verdict.kind, verdict.ok) == ("shape", False)
        assert verdict.message.startswith(
            f"the database at 0038 was made by an unreleased build with another schema (shape "
            f"{shown}, this build's aaaaaaaaaaaa): recreate it"
        )
    by_hand = judge_shape("0038", mine, mine, live="c" * 64)
    assert by_hand is not None
    assert by_hand.kind == "shape"
    assert "records this build's schema (shape aaaaaaaaaaaa) but has another (shape " in (
        by_hand.message
    )
