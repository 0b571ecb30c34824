"""What the HTTP providers share: one streaming POST, server-sent events, and errors without secrets.

An error names the provider's model, the URL and the HTTP status, and carries the server's own message;
the API key is never part of it (it is masked should a server echo it back).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
from pydantic import SecretStr

from citeline.answer.llm import GenerationOptions
from citeline.errors import GenerationError
from citeline.remote import DETAIL_CHARS, error_detail, masked


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The ``data`` of each server-sent event, its ``data:`` lines joined by newlines."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


class StreamingClient:
    """Streams JSON events from one chat endpoint; ``secret`` is the key to keep out of messages."""

    def __init__(self, model_id: str, url: str, headers: dict[str, str], secret: SecretStr | None) -> None:
        self.model_id = model_id
        self.url = url
        self._secret = secret
        self._client = httpx.Client(headers=headers, follow_redirects=False)

    def events(self, body: dict[str, Any], options: GenerationOptions, key_hint: str) -> Iterator[Any]:
        """POST ``body`` and yield each event's parsed JSON until the stream ends or says ``[DONE]``.

        ``options.timeout`` bounds connecting and each wait for data. ``key_hint`` names the setting
        to check when the server refuses the key.
        """
        answering = False
        try:
            with self._client.stream(
                "POST", self.url, json=body, timeout=httpx.Timeout(options.timeout)
            ) as response:
                if response.status_code != 200:
                    response.read()
                    raise self.error(_status_message(response, key_hint))
                answering = True
                for data in sse_data(response.iter_lines()):
                    if data == "[DONE]":
                        return
                    try:
                        event = json.loads(data)
                    except ValueError:
                        raise self.error(f"sent a non-JSON event: {data[:DETAIL_CHARS]!r}") from None
                    yield event
        except httpx.TimeoutException:
            raise self.error(f"did not answer within {options.timeout:g} s (llm_timeout)") from None
        except httpx.HTTPError as exc:
            # Once the server has answered, a failure is its stream breaking off, not a server out of reach.
            what = "broke off its answer midway" if answering else "cannot be reached"
            raise self.error(f"{what}: {type(exc).__name__}: {exc}") from None

    def error(self, reason: str) -> GenerationError:
        """A :class:`GenerationError` naming the model and URL, with any trace of the key masked."""
        return GenerationError(masked(f"{self.model_id}: {self.url} {reason}", self._secret))

    def close(self) -> None:
        self._client.close()


def _status_message(response: httpx.Response, key_hint: str) -> str:
    detail = error_detail(response.text)
    message = f"answered HTTP {response.status_code}" + (f": {detail}" if detail else "")
    if response.status_code in (401, 403):
        message += f"; check {key_hint}"
    elif response.status_code == 404:
        message += "; check the base URL and the model name"
    return message
