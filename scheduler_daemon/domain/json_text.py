"""JSON read and checked without recursion: a text's nesting depth measured by a loop, a
value checked against a bound by one, a text decoded only within a bound (pure).

The standard decoder and encoder recurse once per level: JSON about 1,000 levels deep (under
2 KB) raises RecursionError, and a claim whose jsonb column held such a value failed the whole
pass after its rows were committed `running` (issue 44, KNOWN-FAILURES 40). What comes from the
database is decoded here, row by row, so a value that cannot be read is that row's error."""

import json
from collections.abc import Iterable
from typing import Any

MAX_DEPTH = 32
"""The deepest nesting of a task's trigger arguments (an object is one level, `{"a": []}` two):
refused deeper where they enter (`argument.checked_args`), and a row written deeper by SQL is
its run's error when the daemon reads it."""


class UndecodableJson(ValueError):
    """A JSON text that is not JSON, or nests deeper than allowed; the message is one line."""


def text_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in the JSON text `text` (0 for a scalar),
    counted by one loop over it: brackets inside strings do not count. Not a validator: a
    malformed text gets a number too, and the decoder refuses it afterwards."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def deeper_than(value: object, bound: int) -> bool:
    """Whether dicts, lists and tuples nest in `value` more than `bound` levels, found with a
    stack that stops past the bound: a value too deep for json.dumps, or one that contains
    itself, is simply deeper."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth == bound:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def loads_bounded(text: str, max_depth: int) -> Any:
    """The value of the JSON text `text`, nesting at most `max_depth` levels; UndecodableJson
    (one line) for a deeper or malformed text. Depth is checked before decoding, so the
    decoder never recurses past `max_depth`."""
    # A text cannot nest deeper than it has opening brackets: counted in C, so the loop of
    # text_depth runs only for a text that might be too deep (the claim decodes each row's
    # payload and arguments here, on the hot path).
    if text.count("[") + text.count("{") > max_depth:
        depth = text_depth(text)
        if depth > max_depth:
            raise UndecodableJson(f"JSON nested {depth} levels deep; at most {max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UndecodableJson(f"not JSON: {str(exc).splitlines()[0]}") from None
