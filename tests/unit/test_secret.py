"""Which header names are secrets, and masking them in mappings and in free text (pure)."""

import pytest

from scheduler_daemon.domain.secret import is_secret_header, mask_headers, redact


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "Set-Cookie",
        "X-Api-Key",
        "X-Auth-Token",
        "X-Vault-Token",
        "X-Hub-Signature-256",
        "X-Amz-Security-Token",
        "Private-Token",
        "X-Client-Secret",
    ],
)
def test_secret_headers_are_recognised_by_name_or_word(name: str) -> None:
    assert is_secret_header(name)


@pytest.mark.parametrize("name", ["Accept", "Content-Type", "X-Request-Id", "User-Agent"])
def test_ordinary_headers_are_not_secrets(name: str) -> None:
    assert not is_secret_header(name)


def test_mask_headers_keeps_names_and_ordinary_values() -> None:
    masked = mask_headers({"Authorization": "Bearer s", "Accept": "text/plain"})
    assert masked == {"Authorization": "***", "Accept": "text/plain"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def", "Authorization: ***"),
        ("{'X-Api-Key': 'k1', 'Accept': 'a'}", "{'X-Api-Key': '***', 'Accept': 'a'}"),
        ('{"Cookie": "sid=1; pref=2"}', '{"Cookie": "***"}'),
        ("ValueError: Cookie: sid=1\nnext line", "ValueError: Cookie: ***\nnext line"),
        ("postgresql://u:pw@db/x", "postgresql://u:***@db/x"),
        ("https://user:pw@hook.example/x", "https://user:***@hook.example/x"),
        ("host=db password=pw user=u", "host=db password=*** user=u"),
        ("lease_token=3 run_id=2", "lease_token=3 run_id=2"),
        ("password authentication failed", "password authentication failed"),
    ],
)
def test_redact_masks_secrets_in_text_and_nothing_else(text: str, expected: str) -> None:
    assert redact(text) == expected
