"""domain.json_text: depth measured without recursion; decoding refused past the bound."""

import json
import sys

import pytest

from scheduler_daemon.domain.json_text import (
    MAX_DEPTH,
    UndecodableJson,
    deeper_than,
    loads_bounded,
    text_depth,
)


def _nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[{"', 0),
        ("[]", 1),
        ('{"a": [1, {"b": "]]]"}]}', 3),
        ('["\\"[", [[]]]', 3),
        (_nested(32), 32),
    ],
)
def test_text_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert text_depth(text) == depth


def test_a_text_deeper_than_the_interpreter_can_decode_is_measured_and_refused() -> None:
    """The finding: ~980 levels (under 2 KB) raise RecursionError in json.loads; here the depth
    is counted by a loop and the text refused with one line before the decoder runs."""
    levels = sys.getrecursionlimit() * 2
    text = "[" * levels + "]" * levels
    with pytest.raises(RecursionError):
        json.loads(text)
    assert text_depth(text) == levels
    with pytest.raises(UndecodableJson, match=f"nested {levels} levels deep; at most 32"):
        loads_bounded(text, MAX_DEPTH)


def test_loads_bounded_decodes_within_the_bound_and_refuses_malformed_text() -> None:
    assert loads_bounded(_nested(MAX_DEPTH), MAX_DEPTH) == json.loads(_nested(MAX_DEPTH))
    with pytest.raises(UndecodableJson, match="33 levels"):
        loads_bounded(_nested(MAX_DEPTH + 1), MAX_DEPTH)
    with pytest.raises(UndecodableJson, match=r"^not JSON: "):
        loads_bounded("{", MAX_DEPTH)


def test_deeper_than_stops_past_the_bound_and_a_cycle_is_deeper() -> None:
    deep: list[object] = []
    node = deep
    for _ in range(sys.getrecursionlimit() * 2):
        child: list[object] = []
        node.append(child)
        node = child
    assert deeper_than(deep, MAX_DEPTH)
    shallow = {"a": [1, {"b": ()}], "c": 2}  # dict, list, dict, tuple: 4 levels
    assert deeper_than(shallow, 3)
    assert not deeper_than(shallow, 4)
    assert not deeper_than("x", 0)
    assert deeper_than([], 0)
    cycle: dict[str, object] = {}
    cycle["self"] = cycle
    assert deeper_than(cycle, MAX_DEPTH)
