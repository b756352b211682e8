"""What a follower of a running job's output (`runs logs -f`) has not printed yet (pure): the
stored tail is the job's last 64 KiB, rewritten as the job writes, so each read is matched
against what was shown."""

OUTPUT_SKIPPED = "[… output skipped: more than the last 64 KiB was written between two reads …]\n"


def unseen_output(shown: str, tail: str) -> str:
    """What of a run's output tail `tail` a follower that printed `shown` has not printed: the
    part after the longest start of `tail` that ends `shown` (the tail is the last 64 KiB, so
    its start slides on as the job writes). When nothing overlaps but something was shown, more
    was written between two reads than the tail holds: OUTPUT_SKIPPED, then the whole tail."""
    if not tail or tail.startswith(shown):
        return tail[len(shown) :]
    overlap = _overlap(shown[-len(tail) :], tail)
    if overlap == 0 and shown:
        return OUTPUT_SKIPPED + tail
    return tail[overlap:]


def _overlap(before: str, after: str) -> int:
    """The length of the longest start of `after` that is an end of `before`, in linear time
    (the prefix function of `after`, then a match of it along `before`)."""
    prefix = [0] * len(after)
    k = 0
    for i in range(1, len(after)):
        while k and after[i] != after[k]:
            k = prefix[k - 1]
        if after[i] == after[k]:
            k += 1
        prefix[i] = k
    k = 0
    for char in before:
        while k and (k == len(after) or char != after[k]):
            k = prefix[k - 1]
        if k < len(after) and char == after[k]:
            k += 1
    return k
