"""What counts as a secret in output, and how it is masked (pure): passwords in database URLs and
DSNs, the password in a URL's user info, and the values of secret HTTP headers (Authorization,
Cookie, X-Api-Key, anything named like a token or a key ...), whether in a mapping or in text
such as `Authorization: Bearer x` or `{'X-Api-Key': 'x'}`."""

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

MASK = "***"
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "apikey",
        "x-auth-token",
        "x-access-token",
        "private-token",
    }
)
# A header whose name contains one of these is a secret too (X-Vault-Token, X-Hub-Signature,
# X-Amz-Security-Token, X-Goog-Api-Key, X-Session-Id ...).
_SECRET_WORDS = (
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api-key",
    "cookie",
    "session",
    "signature",
    "credential",
)
_PASSWORD_IN_URL = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)", re.I)
_PASSWORD_IN_DSN = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'[^']*'|\S+)", re.I)
# `Name: value`, `Name=value`, `'Name': 'value'`, `"Name": "value"`: a header-like name (no
# underscore, so `lease_token=3` is not one), a separator, then the value up to a quote or the end
# of the line (Authorization values have spaces, Cookie values semicolons).
_NAME_AND_SEPARATOR = re.compile(
    r"(?<![\w-])(?P<name>[A-Za-z][A-Za-z0-9-]*)['\"]?[ \t]*[:=][ \t]*['\"]?"
)
_VALUE = re.compile(r"[^'\"\r\n]+")


_DSN_PASSWORD = re.compile(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.I)
_QUERY_PASSWORD = re.compile(r"[?&]password=([^&]*)", re.I)
MIN_SECRET_CHARS = 3
"""A password shorter than this is not masked wherever it appears in text (it would mask every
`a` of a log line); the URL and DSN patterns above still mask it where it stands in one."""


def url_passwords(url: str) -> frozenset[str]:
    """Every form of the password a database URL or keyword DSN carries, as written and
    percent-decoded (or unquoted), whatever its encoding mistakes: an unencoded `@` (the
    userinfo runs to the LAST `@` of the authority), a space, `%00`. For masking, never for
    connecting."""
    found: list[str] = []
    if "://" in url:
        rest = url.split("://", 1)[1]
        authority = rest.split("?", 1)[0]
        at = authority.rfind("@")
        if at != -1 and ":" in authority[:at]:
            found.append(authority[:at].split(":", 1)[1])
        found += _QUERY_PASSWORD.findall(rest)
        found += [unquote(f, errors="replace") for f in found]
    else:
        for raw in _DSN_PASSWORD.findall(url):
            found.append(raw)
            if raw.startswith("'"):
                found.append(re.sub(r"\\(.)", r"\1", raw[1:-1]))
    return frozenset(f for f in found if len(f) >= MIN_SECRET_CHARS)


def mask_values(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of each of `values` replaced by ***, longest first."""
    for value in sorted(values, key=len, reverse=True):
        if value and value in text:
            text = text.replace(value, MASK)
    return text


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


_URL_HOST = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(?:[^/?#]*@)?([^/?#@]*)")


def reader_masked_url(url: str) -> str:
    """`url` as the database masks it for the reader role (sd_masked_v1, ADR 0031): its scheme
    and host, then `/***` (user info, path and query hold a webhook's secrets); `***` when it
    is not a URL. `tasks apply` knows it for "keep the stored URL" (task_file.keep_masked)."""
    found = _URL_HOST.match(url)
    return MASK if found is None else f"{found[1]}{found[2]}/{MASK}"


def is_secret_arg(key: str) -> bool:
    """A trigger argument's key that names a secret (ADR 0031): with `_` read as `-`, it
    contains one of the words a secret header's name does (`api_key`, `DB_PASSWORD`,
    `github_token`). The rule the database's sd_masked_v1 applies for the reader role."""
    lowered = key.lower().replace("_", "-")
    return any(word in lowered for word in _SECRET_WORDS)


def mask_args(args: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Trigger arguments as output shows them: each secret one (is_secret_arg) as ***."""
    if args is None:
        return None
    return {k: MASK if is_secret_arg(k) else v for k, v in args.items()}


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` with every secret header's value replaced by ***."""
    return {k: MASK if is_secret_header(k) else v for k, v in headers.items()}


def shown_headers(
    headers: Iterable[tuple[str, str]],
    refs: Iterable[tuple[str, str]] = (),
    *,
    show_secrets: bool = False,
) -> dict[str, str]:
    """Headers as output shows them: secret ones, and those a task file gave as a
    `${SCHEDULER_SECRET_*}` reference (`refs`), as *** unless `show_secrets`."""
    shown = dict(headers)
    if show_secrets:
        return shown
    return mask_headers(shown) | {h: MASK for h, _ in refs if h in shown}


def _mask_header_values(text: str) -> str:
    """Each secret `name: value` with its value masked. A name that is not a secret consumes
    only itself, so `ValueError: Cookie: x` still finds the Cookie."""
    parts, pos = [], 0
    while (found := _NAME_AND_SEPARATOR.search(text, pos)) is not None:
        if not is_secret_header(found["name"]) or text.startswith(MASK, found.end()):
            parts.append(text[pos : found.end("name")])
            pos = found.end("name")
            continue
        value = _VALUE.match(text, found.end())
        parts.append(text[pos : found.end()] + MASK)
        pos = value.end() if value else found.end()
    parts.append(text[pos:])
    return "".join(parts)


def redact(text: str) -> str:
    """`text` with passwords in URLs and DSNs, and secret header values, replaced by ***."""
    if ":" not in text and "=" not in text:  # every pattern needs one: most log values
        return text
    text = _PASSWORD_IN_URL.sub(lambda m: m["head"] + MASK, text)
    text = _PASSWORD_IN_DSN.sub(lambda m: m["head"] + MASK, text)
    return _mask_header_values(text)
