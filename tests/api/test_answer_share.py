"""Each API key's share of the answer slots, over HTTP with a real OpenAI-compatible model server that
holds every answer until the test lets that one go: a key that holds its share of the slots and queue
places is refused (429, naming the setting) while another key still gets a place; and a freed slot goes
to the key served longest ago, not to the request that came first."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from citeline.api.limits import GenerationSlots
from citeline.errors import LimitExceededError
from citeline.settings import Settings
from tests.api.conftest import Server, start_server, stop_server

#: Each key asks about what its scope holds; the ticket tells the model server which request it is.
QUESTIONS = {
    "A": "When does the ACME relief valve open? ticket-{}",
    "B": "When does the Globex boiler relief valve open? ticket-{}",
}
TICKET = re.compile(r"ticket-([AB]\d)")


class HeldModel(ThreadingHTTPServer):
    """``POST /v1/chat/completions``, streamed: each answer, known by the ticket in its question, is
    held until :meth:`let_go` names it. ``asked`` lists the tickets in the order the model got them."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Held)
        self.asked: list[str] = []
        self.changed = threading.Condition()
        self.released: set[str] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def let_go(self, ticket: str) -> None:
        with self.changed:
            self.released.add(ticket)
            self.changed.notify_all()

    def wait_asked(self, count: int, timeout: float = 60) -> list[str]:
        """The tickets asked once ``count`` of them have been (fewer if the time runs out)."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.asked) >= count, timeout=timeout)
            return list(self.asked)


class _Held(BaseHTTPRequestHandler):
    server: HeldModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        found = TICKET.search(body)
        ticket = found.group(1) if found else "?"
        with self.server.changed:
            self.server.asked.append(ticket)
            self.server.changed.notify_all()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.server.changed:
            self.server.changed.wait_for(lambda: ticket in self.server.released, timeout=120)
        self._chunk(
            f"data: {json.dumps({'choices': [{'delta': {'content': 'At 6 bar [1].'}}]})}\n\n".encode()
        )
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


@pytest.fixture(scope="module")
def model() -> Iterator[HeldModel]:
    instance = HeldModel()
    thread = threading.Thread(target=instance.serve_forever, daemon=True)
    thread.start()
    yield instance
    for key in QUESTIONS:
        for n in range(10):
            instance.let_go(f"{key}{n}")
    instance.shutdown()
    instance.server_close()


@pytest.fixture(scope="module")
def shared(server: Server, model: HeldModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The test store answered by ``model``: one answer at a time, four waiting, three per key."""
    env = dict(
        server.env,
        CITELINE_LLM="openai:scripted",
        CITELINE_LLM_BASE_URL=model.url,
        CITELINE_API_MAX_GENERATIONS="1",
        CITELINE_API_GENERATION_QUEUE="4",
        CITELINE_API_MAX_GENERATIONS_PER_KEY="3",
        CITELINE_API_GENERATION_WAIT="120",
        CITELINE_LLM_TIMEOUT="120",
    )
    started = start_server(env, tmp_path_factory.mktemp("shared") / "serve.log")
    started.keys = server.keys
    started.documents = server.documents
    yield started
    stop_server(started)


def _until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {timeout} s"
        time.sleep(0.05)


def test_a_key_over_its_share_is_refused_while_another_key_is_served_first(
    shared: Server, model: HeldModel
) -> None:
    # Two reader keys, "A" (scope acme) and "B" (scope globex): two care-journey teams on one server.
    clients = {"A": shared.as_("reader"), "B": shared.as_("other")}

    def ask(ticket: str) -> httpx.Response:
        question = QUESTIONS[ticket[0]].format(ticket)
        return clients[ticket[0]].post("/chat", json={"question": question})

    def waiting() -> int:
        count: int = shared.ready()["generations"]["waiting"]
        return count

    answers: dict[str, Future[httpx.Response]] = {}
    with ThreadPoolExecutor(max_workers=6) as pool:
        try:
            answers["A1"] = pool.submit(ask, "A1")
            assert model.wait_asked(1) == ["A1"]  # A1 holds the one slot
            answers["A2"] = pool.submit(ask, "A2")
            _until(lambda: waiting() == 1, "A2 waiting")
            answers["A3"] = pool.submit(ask, "A3")
            _until(lambda: waiting() == 2, "A3 waiting")
            # A now holds three answers, its share: a fourth is refused, though the queue has room.
            over = pool.submit(ask, "A4").result(timeout=30)
            # B, well within the same queue, still gets a place.
            answers["B1"] = pool.submit(ask, "B1")
            _until(lambda: waiting() == 3, "B1 waiting")
            assert not answers["B1"].done()
            # Each answer freed lets the next go: B's one question before A's later two.
            for released, count in (("A1", 2), ("B1", 3), ("A2", 4), ("A3", 4)):
                model.let_go(released)
                model.wait_asked(count)
            asked = model.wait_asked(4)
        finally:
            for ticket in ("A1", "A2", "A3", "A4", "B1"):
                model.let_go(ticket)
            statuses = {ticket: answer.result().status_code for ticket, answer in answers.items()}
            for client in clients.values():
                client.close()
    assert over.status_code == 429, over.text
    error = over.json()["error"]
    assert error["code"] == "limit_exceeded"
    assert "CITELINE_API_MAX_GENERATIONS_PER_KEY" in error["message"]
    assert "3 answers" in error["message"], error["message"]
    assert int(over.headers["Retry-After"]) >= 1
    assert asked == ["A1", "B1", "A2", "A3"]
    assert statuses == {"A1": 200, "A2": 200, "A3": 200, "B1": 200}
    generations = shared.ready()["generations"]
    assert (generations["running"], generations["waiting"]) == (0, 0)


def test_a_lone_key_may_use_every_slot_and_half_the_queue_by_default() -> None:
    def share(size: int, queue: int) -> int:
        return GenerationSlots(Settings(api_max_generations=size, api_generation_queue=queue)).per_key

    assert share(2, 16) == 10
    assert share(3, 0) == 3
    assert share(1, 1) == 2  # half a queue place, rounded up: a lone key may still wait


def test_a_request_that_stops_waiting_gives_its_place_and_its_share_back() -> None:
    async def run() -> None:
        settings = Settings(
            api_max_generations=1,
            api_generation_queue=4,
            api_max_generations_per_key=2,
            api_generation_wait=0.2,
        )
        slots = GenerationSlots(settings)
        holder = await slots.acquire("A")
        # Its wait runs out: 503, naming the wait.
        with pytest.raises(LimitExceededError) as waited:
            await slots.acquire("A")
        assert waited.value.http_status == 503
        assert "CITELINE_API_GENERATION_WAIT" in str(waited.value)
        # Its client leaves (the request is cancelled) while it waits.
        leaving = asyncio.create_task(slots.acquire("A"))
        await asyncio.sleep(0.01)
        assert slots.counts.waiting == 1
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        assert (slots.counts.running, slots.counts.waiting) == (1, 0)
        # Neither kept a place in A's share: A may wait once more, and gets the slot when it is free.
        queued = asyncio.create_task(slots.acquire("A"))
        await asyncio.sleep(0.01)
        with pytest.raises(LimitExceededError) as over:
            await slots.acquire("A")
        assert over.value.http_status == 429
        holder.release()
        slot = await asyncio.wait_for(queued, timeout=5)
        assert (slots.counts.running, slots.counts.waiting) == (1, 0)
        slot.release()
        assert (slots.counts.running, slots.counts.started, slots.counts.finished) == (0, 2, 2)

    asyncio.run(run())
