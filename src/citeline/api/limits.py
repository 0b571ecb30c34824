"""The server's limits, each named by a setting: request body size, question length, requests per key
per minute, and answers generated at once (with a bounded queue, and each key's fair share of both);
and the URL's length, which the HTTP parser fixes.

Every refusal is a :class:`LimitExceededError` whose message names the limit and its setting. The
generation slots belong to the server process (they guard its own cores): with ``--workers N`` each
worker has its own. The request counts live in the process too, unless ``api_rate_limit_redis_url``
names a Redis, where every process and replica counts each key's requests together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass

from limits import RateLimitItemPerMinute
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage, Storage
from limits.strategies import MovingWindowRateLimiter
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citeline.api.errors import error_response
from citeline.errors import LimitExceededError
from citeline.metrics import metrics
from citeline.settings import Settings

log = logging.getLogger("citeline.api")

#: What a client told to wait for a generation slot is asked to wait before trying again, in seconds.
GENERATION_RETRY_AFTER = 10.0
#: Room for a multipart upload's form fields on top of the file itself.
_FORM_FIELDS_BYTES = 1_048_576
#: The longest URL (path and query string) served: the most httptools, uvicorn's HTTP parser, can split
#: into path and query (it keeps their offsets in 16 bits). Not a setting, since it cannot be raised.
MAX_URL_BYTES = 65_535
#: Where :class:`citeline.api.protocol.HttpProtocol` puts the length of a URL it cut to
#: ``MAX_URL_BYTES`` (an ASGI scope extension), so :class:`UrlLengthLimit` refuses the request.
URL_BYTES_EXTENSION = "citeline.url_bytes"


def check_text_length(text: str, what: str, settings: Settings) -> None:
    """Refuse a question or query longer than the ``api_max_question_chars`` setting."""
    limit = settings.api_max_question_chars
    if len(text) > limit:
        raise LimitExceededError(
            f"the {what} is {len(text)} characters long, over the limit of {limit} "
            "(setting CITELINE_API_MAX_QUESTION_CHARS)"
        )


class BodySizeLimit:
    """ASGI middleware refusing request bodies over ``api_max_body_bytes`` with a 413.

    Multipart uploads are bounded by ``upload_max_bytes`` instead (the upload path checks the file
    itself). A body that announces its length is refused before it is read; one sent in chunks is
    counted as it arrives.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if headers.get("content-type", "").startswith("multipart/form-data"):
            limit, setting = self.settings.upload_max_bytes + _FORM_FIELDS_BYTES, "CITELINE_UPLOAD_MAX_BYTES"
        else:
            limit, setting = self.settings.api_max_body_bytes, "CITELINE_API_MAX_BODY_BYTES"
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, int(declared), limit, setting)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # An HTTPException is what the framework lets through from reading a body (other
                    # errors become a 400); the error handlers give it the API's shape all the same.
                    raise HTTPException(413, _message(seen, limit, setting, at_least=True))
            return message

        await self.app(scope, counted, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, size: int, limit: int, setting: str
    ) -> None:
        response = error_response(LimitExceededError(_message(size, limit, setting)))
        await response(scope, receive, send)


def _message(size: int, limit: int, setting: str, *, at_least: bool = False) -> str:
    amount = f"over {size}" if at_least else str(size)
    return f"the request body is {amount} bytes, over the limit of {limit} (setting {setting})"


class UrlLengthLimit:
    """ASGI middleware refusing a URL over :data:`MAX_URL_BYTES` with a 414 in the API's error shape.

    Under ``citeline serve`` such a URL reaches the app cut short, its full length in the scope (see
    :mod:`citeline.api.protocol`); under another server it is measured here.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            cut = (scope.get("extensions") or {}).get(URL_BYTES_EXTENSION)
            size = cut["length"] if cut else _url_bytes(scope)
            if size > MAX_URL_BYTES:
                error = LimitExceededError(
                    f"the URL is {size} bytes long, over the limit of {MAX_URL_BYTES}; send long values in "
                    "a request body instead (POST /search takes every filter and knob GET /search does)",
                    http_status=414,
                )
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _url_bytes(scope: Scope) -> int:
    path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope["query_string"]
    return len(path) + (len(query) + 1 if query else 0)


class RateLimiter:
    """Requests per API key per minute (``api_rate_limit``; 0 turns it off), over a moving window.

    Counted in this process, or in the Redis at ``redis_url``, shared by every process that names it.
    Should that Redis stop answering, requests are let through (and the failure logged) rather than
    refused: the limit protects the service, and an outage of its counter should not stop it.
    """

    def __init__(self, per_minute: int, redis_url: str | None = None) -> None:
        self.per_minute = per_minute
        self._item = RateLimitItemPerMinute(per_minute) if per_minute else None
        storage: Storage = MemoryStorage()
        if redis_url is not None:
            # The limits library's own Redis storage: its moving window is one Lua script per hit.
            storage = RedisStorage(
                redis_url,
                wrap_exceptions=True,
                key_prefix="citeline-rate",
                socket_timeout=1.0,
                socket_connect_timeout=1.0,
            )
        self._limiter = MovingWindowRateLimiter(storage)
        self._failing_since: float | None = None

    def hit(self, key: str) -> None:
        """Count one request of ``key``; :class:`LimitExceededError` (429) once over the limit."""
        if self._item is None:
            return
        try:
            if self._limiter.hit(self._item, key):
                self._failing_since = None
                return
            reset = self._limiter.get_window_stats(self._item, key).reset_time
        except StorageError as exc:
            now = time.monotonic()
            if self._failing_since is None or now - self._failing_since > 60:
                log.warning(
                    "the rate limit's Redis (CITELINE_API_RATE_LIMIT_REDIS_URL) does not answer (%s); "
                    "requests are not counted until it does",
                    exc.storage_error,
                )
                self._failing_since = now
            return
        raise LimitExceededError(
            f"more than {self.per_minute} requests a minute with this API key "
            "(setting CITELINE_API_RATE_LIMIT); slow down",
            http_status=429,
            retry_after=max(1.0, reset - time.time()),
        )


@dataclass
class GenerationCounts:
    """What the generation slots have done since start-up (``GET /health/ready`` reports it)."""

    running: int = 0
    waiting: int = 0
    started: int = 0
    finished: int = 0
    #: Answers whose client went away before the answer was complete: their generation was stopped.
    stopped_early: int = 0


class GenerationSlot:
    """One held generation slot; :meth:`release` gives it back (once, however often it is called)."""

    def __init__(self, slots: GenerationSlots, key: str) -> None:
        self._slots = slots
        self._key = key
        self._held = True

    def release(self, *, stopped_early: bool = False) -> None:
        """Give the slot back; ``stopped_early`` when the client left before the answer was complete."""
        if not self._held:
            return
        self._held = False
        self._slots._release(self._key, stopped_early=stopped_early)


def _answers(n: int) -> str:
    return "1 answer is" if n == 1 else f"{n} answers are"


def default_share(size: int, queue: int) -> int:
    """A key's share when ``api_max_generations_per_key`` is unset: every slot and half the queue,
    rounded up (a queue of one place stays open to a lone key).

    A lone key then answers as fast as without a share (it keeps every slot busy; what it is refused
    would only have waited), while the rest of the queue is always open to the other keys.
    """
    return size + (queue + 1) // 2


class GenerationSlots:
    """At most ``api_max_generations`` answers at once; up to ``api_generation_queue`` more wait for up
    to ``api_generation_wait`` seconds, and the rest get a 503 with ``Retry-After``.

    Each API key (open mode is one key) may hold ``per_key`` of these answers, generating and waiting
    together; beyond its share it gets a 429 while other keys still get slots (when the queue is full,
    every key gets the 503). A freed slot goes to the waiting key with the fewest answers generating,
    and of those to the one given a slot longest ago: a round robin by key, so one key's burst cannot
    starve another key's single question. Within a key, its answers go first come, first served.
    """

    def __init__(self, settings: Settings) -> None:
        self.size = settings.api_max_generations
        self.queue = settings.api_generation_queue
        self.wait = settings.api_generation_wait
        self.per_key = settings.api_max_generations_per_key or default_share(self.size, self.queue)
        self.counts = GenerationCounts()
        # By key: answers held (generating and waiting), the waiting ones' futures in arrival order,
        # and the number of the grant that last gave it a slot. A key holding nothing is forgotten.
        self._held: dict[str, int] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._served: dict[str, int] = {}
        self._gauges = metrics()
        self._gauges.slots.set(self.size)
        self._publish()

    def _publish(self) -> None:
        # Set, not added to: one GenerationSlots per process, and its counts are the truth.
        self._gauges.slots_in_use.set(self.counts.running)
        self._gauges.slots_queued.set(self.counts.waiting)

    async def acquire(self, key: str) -> GenerationSlot:
        """A slot for an answer of API key ``key`` (its user id), once one is free and its turn comes.

        :class:`LimitExceededError`: 503 when the queue is full (for every key alike) or no slot came
        free within ``wait`` seconds; 429 when ``key`` already holds its share.
        """
        free = self.counts.running < self.size
        if not free and self.counts.waiting >= self.queue:
            # Full for every key alike: the server's limit is the reason, whatever this key holds.
            raise self._busy(
                f"{_answers(self.size)} being generated and {self.counts.waiting} waiting, the "
                f"most the queue holds (settings CITELINE_API_MAX_GENERATIONS, "
                f"CITELINE_API_GENERATION_QUEUE)"
            )
        held = self._held.get(key, 0)
        if held >= self.per_key:
            raise LimitExceededError(
                f"this API key already has {held} answers being generated or waiting, its share of this "
                f"server's {self.size} answer slots and {self.queue} queue places (setting "
                "CITELINE_API_MAX_GENERATIONS_PER_KEY); wait for one of them to finish",
                http_status=429,
                retry_after=GENERATION_RETRY_AFTER,
            )
        self._held[key] = held + 1
        # A slot is only ever free while nobody waits: a freed slot is handed to a waiter at once.
        if free:
            self._start(key)
            return GenerationSlot(self, key)
        turn = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(turn)
        self.counts.waiting += 1
        self._publish()
        try:
            async with asyncio.timeout(self.wait):
                await turn
        except BaseException as exc:
            if not turn.done() or turn.cancelled():
                self._leave(key, turn)
                if isinstance(exc, TimeoutError):
                    raise self._busy(
                        f"no answer slot came free within {self.wait:g} s (settings "
                        "CITELINE_API_MAX_GENERATIONS, CITELINE_API_GENERATION_WAIT)"
                    ) from None
                raise
            # The slot was handed over as the wait ended: a timed-out request takes it after all, and
            # one whose client left gives it to the next.
            if not isinstance(exc, TimeoutError):
                self._release(key, stopped_early=True)
                raise
        return GenerationSlot(self, key)

    def _start(self, key: str) -> None:
        self.counts.running += 1
        self.counts.started += 1
        self._served[key] = self.counts.started
        self._publish()

    def _leave(self, key: str, turn: asyncio.Future[None]) -> None:
        """A waiting request gave up (its wait ran out, or its client left) before its turn came."""
        waiting = self._waiting[key]
        waiting.remove(turn)
        if not waiting:
            del self._waiting[key]
        self.counts.waiting -= 1
        self._forget(key)
        self._publish()

    def _forget(self, key: str) -> None:
        self._held[key] -= 1
        if not self._held[key]:
            del self._held[key]
            self._served.pop(key, None)

    def _release(self, key: str, *, stopped_early: bool) -> None:
        self.counts.running -= 1
        if stopped_early:
            self.counts.stopped_early += 1
        else:
            self.counts.finished += 1
        self._forget(key)
        if self._waiting:
            self._hand_over()
        self._publish()

    def _hand_over(self) -> None:
        """Give the freed slot to the next key's first waiting request (see the class's docstring)."""

        def claim(key: str) -> tuple[int, int]:
            generating = self._held[key] - len(self._waiting[key])
            return generating, self._served.get(key, 0)

        key = min(self._waiting, key=claim)
        waiting = self._waiting[key]
        turn = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        self.counts.waiting -= 1
        self._start(key)
        turn.set_result(None)

    @staticmethod
    def _busy(message: str) -> LimitExceededError:
        return LimitExceededError(
            f"the server is busy answering: {message}; try again later",
            http_status=503,
            retry_after=GENERATION_RETRY_AFTER,
        )
