"""What a job returned, made storable in a PostgreSQL text column before it reaches SQL: NUL and
unpaired surrogates replaced, sizes capped (pure).

PostgreSQL refuses NUL in `text` and psycopg refuses a string it cannot encode as UTF-8; a job's
output, its error line or an http response body reaching the completer unmended failed the whole
pass, and the next replica took the run over and failed the same way (issue 28)."""

REPLACEMENT = "\ufffd"
"""What a NUL or an unpaired surrogate becomes (U+FFFD, as a lenient UTF-8 decoder writes)."""

OUTPUT_TAIL_BYTES = 65536
"""At most this many UTF-8 bytes of the end of a job's output are stored (the executors keep as
much: executors.wire.OUTPUT_TAIL_BYTES)."""

ERROR_CHARS = 2000
"""At most this many characters of a job's error line are stored; a longer one keeps its
start and says how much was cut."""


def storable_text(text: str) -> str:
    """`text` with every NUL and unpaired surrogate replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    if text.isascii():  # the common case, checked in C: nothing else to mend
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: a python job's str, or a surrogateescape decode
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_output(text: str) -> str:
    """The storable end of a job's output: at most OUTPUT_TAIL_BYTES bytes of UTF-8, cut at a
    character boundary."""
    text = storable_text(text)
    if text.isascii() and len(text) <= OUTPUT_TAIL_BYTES:  # one byte per character
        return text
    data = text.encode("utf-8")
    if len(data) <= OUTPUT_TAIL_BYTES:
        return text
    return data[-OUTPUT_TAIL_BYTES:].decode("utf-8", "ignore")


def storable_error(text: str | None) -> str | None:
    """A storable error line: at most ERROR_CHARS characters."""
    if text is None:
        return None
    text = storable_text(text)
    if len(text) <= ERROR_CHARS:
        return text
    keep = ERROR_CHARS - 40  # room for the suffix
    return f"{text[:keep]}… ({len(text) - keep} more characters)"
