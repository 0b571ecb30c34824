"""What the remote embedding providers share: batching, retries with backoff, timeouts, checked replies.

A provider (``openai:``, ``ollama:``) says how one batch becomes a request body and how a reply
becomes vectors; :class:`RemoteEmbedder` does the rest. Each request carries at most
``embed_batch_size`` texts and may take ``embed_timeout`` seconds to connect and then between reads.
A request that fails for a passing reason (timeout, refused or dropped connection, HTTP 408, 425, 429,
500, 502, 503, 504) is retried ``embed_retries`` times, the first after ``embed_retry_delay`` seconds
and each later one after twice as long, or after what the server's ``Retry-After`` asks (up to a
minute).

Errors name the model and URL, never the key: it is masked wherever a server's reply quotes it. They
are, after the retries:

- :class:`ConfigError` when the settings are wrong: the key is refused (401, 403) or the server does
  not know the model or path (404);
- :class:`InvalidRequestError` when the server refuses the texts themselves (400, 413, 422): sending
  them again cannot help;
- :class:`EmbeddingError` otherwise (server down or overloaded, a malformed reply), which the job
  runner treats as passing and retries later.

Every vector is checked (count, dimension, finite, not zero) and L2-normalised here, whatever the server
did, so that cosine distances in the store are comparable.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
from pydantic import SecretStr

from citeline.errors import CitelineError, ConfigError, EmbeddingError, InvalidRequestError
from citeline.remote import error_detail, masked
from citeline.settings import Settings

log = logging.getLogger(__name__)

#: HTTP statuses worth sending the same request again for.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: The longest wait a server's Retry-After may impose between two tries, in seconds.
MAX_RETRY_AFTER = 60.0
#: The text embedded at start-up to learn the model's dimension (and that the server, key and model work).
PROBE_TEXT = "dimension probe"


class RemoteEmbedder:
    """An :class:`~citeline.embed.base.Embedder` served over HTTP; providers subclass it.

    A subclass sets ``path`` (appended to the base URL), builds a batch's request in :meth:`body` and
    reads the vectors from the reply in :meth:`vectors`. Construction sends one probe request, so a
    wrong URL, key or model fails here rather than in the middle of an ingest; it sets ``dimension``.
    """

    path: str

    def __init__(
        self,
        model_id: str,
        model: str,
        base: str,
        settings: Settings,
        *,
        key: SecretStr | None,
        key_setting: str,
        max_tokens: int = 0,
    ) -> None:
        self.model_id = model_id
        self.model = model
        #: Tokens after which the server cuts a text; 0 when the provider does not say.
        self.max_tokens = max_tokens
        self.url = f"{base}{self.path}"
        self.batch_size = settings.embed_batch_size
        self._retries = settings.embed_retries
        self._delay = settings.embed_retry_delay
        self._timeout = settings.embed_timeout
        self._key = key
        self._key_setting = key_setting
        headers = {"Accept": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key.get_secret_value()}"
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(self._timeout), follow_redirects=False
        )
        self.dimension = 0
        try:
            self.dimension = int(self._request([PROBE_TEXT]).shape[1])
        except BaseException:
            self._client.close()
            raise

    def body(self, texts: list[str]) -> dict[str, Any]:
        """The JSON request that embeds ``texts``."""
        raise NotImplementedError

    def vectors(self, reply: Any, count: int) -> list[Any]:
        """The ``count`` vectors in ``reply`` (the parsed JSON), in the order of the texts sent."""
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as an ``(len(texts), dimension)`` float32 array of L2-normalised rows, in order.

        Sends one request per ``embed_batch_size`` texts, one after the other.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string; wrap it in a list")
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            out[start : start + len(batch)] = self._request(batch)
        return out

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _request(self, texts: list[str]) -> npt.NDArray[np.float32]:
        attempt = 0
        while True:
            try:
                reply = self._post(texts)
            except _RetryableError as exc:
                if attempt >= self._retries:
                    tries = f"{attempt + 1} tries" if attempt else "1 try"
                    raise self._error(EmbeddingError, f"{exc.reason} (after {tries})") from None
                wait = exc.retry_after if exc.retry_after is not None else self._delay * 2**attempt
                attempt += 1
                log.warning(
                    "%s",
                    masked(
                        f"{self.model_id}: {self.url} {exc.reason}; retry {attempt} of "
                        f"{self._retries} in {wait:g} s",
                        self._key,
                    ),
                )
                time.sleep(wait)
                continue
            return self._checked(reply, len(texts))

    def _post(self, texts: list[str]) -> Any:
        try:
            response = self._client.post(self.url, json=self.body(texts))
        except httpx.TimeoutException:
            raise _RetryableError(f"did not answer within {self._timeout:g} s (embed_timeout)") from None
        except httpx.TransportError as exc:
            raise _RetryableError(f"cannot be reached: {type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status == 200:
            try:
                return response.json()
            except ValueError:
                raise self._error(
                    EmbeddingError, f"answered with something other than JSON: {response.text[:200]!r}"
                ) from None
        detail = error_detail(response.text)
        reason = f"answered HTTP {status}" + (f": {detail}" if detail else "")
        if status in RETRY_STATUSES:
            raise _RetryableError(reason, _retry_after(response))
        if status in (401, 403):
            raise self._error(ConfigError, f"{reason}; check {self._key_setting}")
        if status == 404:
            raise self._error(ConfigError, f"{reason}; check embed_base_url and the model name")
        if status in (400, 413, 422):
            raise self._error(InvalidRequestError, f"{reason} for a batch of {len(texts)} texts")
        raise self._error(EmbeddingError, reason)

    def _checked(self, reply: Any, count: int) -> npt.NDArray[np.float32]:
        try:
            rows = self.vectors(reply, count)
            matrix = np.asarray(rows, dtype=np.float32)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise self._error(EmbeddingError, f"sent a reply without {count} vectors: {exc}") from None
        if matrix.ndim != 2 or matrix.shape[0] != count:
            raise self._error(
                EmbeddingError, f"sent {matrix.shape[0] if matrix.ndim else 0} vectors for {count} texts"
            )
        if self.dimension and matrix.shape[1] != self.dimension:
            raise self._error(
                EmbeddingError,
                f"sent vectors of dimension {matrix.shape[1]}, not the model's {self.dimension}: the server "
                "now serves another model under this name",
            )
        if matrix.shape[1] == 0 or not np.isfinite(matrix).all():
            raise self._error(EmbeddingError, "sent empty or non-finite vectors")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if (norms == 0).any():
            raise self._error(EmbeddingError, "sent an all-zero vector, which has no direction to compare")
        normalised: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
        return normalised

    def _error(self, kind: type[CitelineError], reason: str) -> CitelineError:
        return kind(masked(f"{self.model_id}: {self.url} {reason}", self._key))


class _RetryableError(Exception):
    """A failure worth another try; ``retry_after`` is the server's own wait, in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    """The server's Retry-After (seconds or an HTTP date), capped at :data:`MAX_RETRY_AFTER`."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
