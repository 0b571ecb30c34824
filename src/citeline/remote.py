"""What every client of a remote model service shares: base URLs checked once, keys kept out of text.

The answering models (``answer/providers``) and the embedders (``embed/``) both talk to servers of the
user's choosing with a key from the settings; an error or log line may carry a server's reply, which
can echo the key back.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import SecretStr

from citeline.errors import ConfigError

#: Characters of a server's error message quoted in an error.
DETAIL_CHARS = 300
# A very short key could match ordinary words of a message; real keys are long.
_MIN_MASKED_KEY = 8


def base_url(spec: str, value: str, setting: str) -> str:
    """``value`` without a trailing slash, once it is an http(s) URL; else a :class:`ConfigError`."""
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{spec}: {setting} {value!r} is not a valid URL ({exc})") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{spec}: {setting} {value!r} must be an http:// or https:// URL")
    return value.rstrip("/")


def masked(text: str, secret: SecretStr | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***``."""
    key = secret.get_secret_value() if secret is not None else ""
    if len(key) >= _MIN_MASKED_KEY:
        return text.replace(key, "***")
    return text


def error_detail(payload: Any) -> str:
    """The human part of an error body or event (``{"error": {"message": ...}}`` and its variants)."""
    if isinstance(payload, str):
        text = payload
        try:
            payload = json.loads(text)
        except ValueError:
            return text.strip()[:DETAIL_CHARS]
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("type") or error)[:DETAIL_CHARS]
        return str(error)[:DETAIL_CHARS]
    return str(payload)[:DETAIL_CHARS]
