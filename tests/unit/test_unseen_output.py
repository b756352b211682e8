"""`runs logs -f`: what of a run's output tail a follower has not printed yet (pure)."""

from hypothesis import given
from hypothesis import strategies as st

from scheduler_daemon.domain.followed_output import OUTPUT_SKIPPED, unseen_output


def test_a_growing_tail_prints_what_was_added() -> None:
    assert unseen_output("", "one\n") == "one\n"
    assert unseen_output("one\n", "one\ntwo\n") == "one\ntwo\n"[4:]
    assert unseen_output("one\n", "one\n") == ""


def test_a_tail_whose_start_slid_on_prints_only_the_new_end() -> None:
    assert unseen_output("aaaabbbb", "bbbbcccc") == "cccc"
    assert unseen_output("xyxyxy", "xyxyz") == "z"  # the longest overlap, not the first


def test_a_tail_that_outran_the_follower_says_output_was_skipped() -> None:
    assert unseen_output("old\n", "new\n") == OUTPUT_SKIPPED + "new\n"


def test_an_empty_tail_prints_nothing() -> None:
    assert unseen_output("shown\n", "") == ""


@given(st.text(max_size=60), st.text(max_size=60))
def test_without_a_slide_printed_then_unseen_is_the_tail(shown: str, more: str) -> None:
    assert shown + unseen_output(shown, shown + more) == shown + more


@given(st.text(max_size=60), st.text(min_size=1, max_size=60))
def test_after_a_slide_only_an_end_of_the_tail_is_printed_never_a_duplicate(
    shown: str, tail: str
) -> None:
    """Whatever the two reads, the follower prints an end of the new tail (after the longest
    overlap with what it printed), or says output was skipped and prints the tail whole."""
    unseen = unseen_output(shown, tail)
    if unseen.startswith(OUTPUT_SKIPPED):
        assert unseen == OUTPUT_SKIPPED + tail
    else:
        assert tail.endswith(unseen)
        assert shown.endswith(tail[: len(tail) - len(unseen)])
