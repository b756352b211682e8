"""What a job returned is made storable before it reaches SQL (domain/storable.py)."""

from hypothesis import example, given
from hypothesis import strategies as st

from scheduler_daemon.domain.storable import (
    ERROR_CHARS,
    OUTPUT_TAIL_BYTES,
    REPLACEMENT,
    storable_error,
    storable_output,
    storable_text,
)
from scheduler_daemon.executors.wire import OUTPUT_TAIL_BYTES as EXECUTORS_KEEP


def test_nul_and_unpaired_surrogates_are_replaced_and_the_rest_kept() -> None:
    assert storable_text("a\x00b") == f"a{REPLACEMENT}b"
    assert storable_text("x\ud800y\udcffz") == f"x{REPLACEMENT}y{REPLACEMENT}z"
    assert storable_text("ok ✓ 😀\n\t") == "ok ✓ 😀\n\t"


def test_the_output_keeps_its_end_within_the_byte_cap_at_a_character_boundary() -> None:
    text = "é" * OUTPUT_TAIL_BYTES + "the end"
    kept = storable_output(text)
    assert kept.endswith("the end")
    assert len(kept.encode()) <= OUTPUT_TAIL_BYTES
    assert REPLACEMENT not in kept


def test_a_long_error_keeps_its_start_and_says_how_much_was_cut() -> None:
    error = storable_error("E" * 10_000)
    assert error is not None
    assert len(error) <= ERROR_CHARS
    assert error.startswith("EEE")
    assert error.endswith(f"({10_000 - (ERROR_CHARS - 40)} more characters)")
    assert storable_error(None) is None


def test_the_cap_matches_what_the_executors_keep() -> None:
    assert OUTPUT_TAIL_BYTES == EXECUTORS_KEEP


@given(st.text(alphabet=st.characters(codec=None)))
@example("\x00")
@example("\ud800")
def test_any_text_becomes_utf8_without_nul_and_stays_so(text: str) -> None:
    for made in (storable_output(text), storable_error(text)):
        assert made is not None
        assert "\x00" not in made
        made.encode("utf-8")  # raises on an unpaired surrogate
        assert storable_text(made) == made  # idempotent


def test_clean_text_and_outcomes_are_passed_through_without_a_copy() -> None:
    # The completer makes every outcome storable on the hot path: a clean one costs no copy.
    from scheduler_daemon.executors.base import Outcome
    from scheduler_daemon.services.completer import storable

    text = "plain ascii output\n" * 100
    assert storable_text(text) is text
    assert storable_output(text) is text
    clean = Outcome("success", exit_code=0, output_tail="ok\n", error=None)
    assert storable(clean) is clean
    dirty = Outcome("failed", output_tail="a\x00b", error="é\ud800")
    mended = storable(dirty)
    assert (mended.output_tail, mended.error) == (f"a{REPLACEMENT}b", f"é{REPLACEMENT}")
