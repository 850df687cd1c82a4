"""How the text of some settings is read: webhook URL lists and signing keys, tokens, worker
pools.
Used by `Settings`' validators and by the code that reads those settings."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from urllib.parse import urlsplit

from knowledgeops.registry.spec import Pool

NO_WEBHOOK_SECRET = (
    "WEBHOOK_SECRET is empty but WEBHOOK_URLS is set: webhooks are always signed. Set "
    'WEBHOOK_SECRET=whsec_<base64 of 32 random bytes> (python -c "import base64,secrets; '
    "print('whsec_'+base64.b64encode(secrets.token_bytes(32)).decode())\") and give the "
    "receivers the same value, or unset WEBHOOK_URLS"
)
# The Standard Webhooks specification's smallest recommended key (192 bits).
WEBHOOK_KEY_MIN_BYTES = 24


def check_api_tokens(value: str) -> str:
    """API_TOKENS: token:caller[:owner], ..."""
    # Caller and owner end up in 200-character columns (audit actor, document owner).
    for item in value.split(","):
        token, _, rest = item.strip().partition(":")
        caller, _, owner = rest.partition(":")
        if item.strip() and (len(token) < 16 or len(caller) > 200 or len(owner) > 200):
            raise ValueError(
                "each entry is token:caller[:owner] with a token of 16+ characters and "
                "caller / owner of at most 200 characters"
            )
    return value


def read_tokens(value: str) -> dict[str, tuple[str, str | None]]:
    """`token:name[:owner],...` -> token -> (name, owner or None); a name may be empty."""
    out: dict[str, tuple[str, str | None]] = {}
    for item in value.split(","):
        token, _, rest = item.strip().partition(":")
        name, _, owner = rest.partition(":")
        if token:
            out[token] = (name, owner or None)
    return out


def http_url(url: str) -> bool:
    """An http(s) URL with a host and a usable port, of at most 1000 characters."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        return False
    return ok and len(url) <= 1000


def split_urls(value: str) -> list[str]:
    return [u.strip() for u in value.split(",") if u.strip()]


def webhook_key(secret: str) -> bytes:
    """The HMAC key of WEBHOOK_SECRET: `whsec_<base64>` decoded as the Standard Webhooks
    specification says; any other string is the key as is (its UTF-8 bytes), so a secret can
    never be read two ways. ValueError, naming the setting, when it is not usable."""
    if secret.startswith("whsec_"):
        encoded = secret.removeprefix("whsec_")
        try:
            # Strict: a receiver's library skips characters outside base64, which would give
            # it a different key than ours.
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error:
            raise ValueError(
                "WEBHOOK_SECRET starts with whsec_ but the rest is not standard base64"
            ) from None
    else:
        key = secret.encode()
    if len(key) < WEBHOOK_KEY_MIN_BYTES:
        raise ValueError(
            f"WEBHOOK_SECRET gives a {len(key)}-byte key; use at least {WEBHOOK_KEY_MIN_BYTES} "
            "random bytes (whsec_ + base64 of 32 random bytes)"
        )
    return key


def parse_pools(names: Sequence[str]) -> list[Pool]:
    """Pools by name (blank names skipped; none: every pool), or ValueError naming the
    unknown ones and the known ones."""
    wanted = [n.strip() for n in names if n.strip()]
    unknown = [n for n in wanted if n not in {p.value for p in Pool}]
    if unknown:
        raise ValueError(
            f"unknown pool(s) {', '.join(unknown)}; the pools are "
            + ", ".join(p.value for p in Pool)
        )
    return [Pool(n) for n in dict.fromkeys(wanted)] or list(Pool)


class SettingsError(RuntimeError):
    """Raised with a message naming each invalid setting and what is wrong with it."""
