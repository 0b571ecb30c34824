"""Answer-stage fixtures: the real packaged embedder, passages from real text, and a scripted model."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from citeline.answer import CitationNumbering, Complete, answer_stream
from citeline.answer.llm import GenerationOptions, Message, get_llm
from citeline.answer.providers.local import LocalLLM
from citeline.embed import Embedder, get_embedder
from citeline.engine import Citeline
from citeline.errors import GenerationError
from citeline.retrieve.search import Hit
from citeline.settings import Settings

# A pump manual, one passage per page, as a search would return them (best first).
PUMP_PAGES = [
    "Before first use, prime the pump: open the vent plug on top of the volute and fill the casing "
    "with clean water until it overflows. Close the vent plug and start the motor.",
    "Never run the pump dry. Running without water destroys the mechanical seal within seconds and "
    "voids the warranty.",
    "In winter, drain the volute through the drain plug so that frost cannot crack the casing.",
    "The motor is rated 230 V, 50 Hz, 750 W. Connect it to an outlet protected by a residual current device.",
]


def make_hit(chunk_id: int, text: str, *, page: int = 1, start: int = 0, title: str = "Pump manual") -> Hit:
    """A hit as search returns it, for chunk ``chunk_id`` holding ``text`` at ``start`` of ``page``."""
    return Hit(
        chunk_id=chunk_id,
        document_id=uuid.UUID(int=7),
        document_name="pump-manual.pdf",
        title=title,
        version=2,
        content_type="application/pdf",
        page=page,
        start=start,
        end=start + len(text),
        section=None,
        chunk_index=page - 1,
        total_chunks=len(PUMP_PAGES),
        text=text,
        distance=0.3,
        similarity=0.7,
        keyword_score=1.0,
        fused_score=0.5,
    )


def pump_hits() -> list[Hit]:
    """The pump manual's pages as hits with chunk ids 101-104 (page n is chunk 100 + n)."""
    return [make_hit(100 + n, text, page=n, start=10) for n, text in enumerate(PUMP_PAGES, start=1)]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return get_embedder(Settings().embedding_model)


class ScriptedLLM:
    """Plays a model's reply: streams ``reply`` in small pieces, then raises ``error`` if one is given.

    It stands in for the model's output only; everything that reads the output is the code under test.
    ``delay`` seconds pass before each piece, as a model on a busy CPU would take.
    """

    model_id = "scripted:test"

    def __init__(
        self, reply: str = "", *, error: GenerationError | None = None, piece: int = 3, delay: float = 0.0
    ) -> None:
        self.reply = reply
        self.error = error
        self.piece = piece
        self.delay = delay
        self.calls: list[list[Message]] = []
        self.options: list[GenerationOptions] = []
        self.yielded = 0

    def stream(self, messages: Sequence[Message], options: GenerationOptions) -> Iterator[str]:
        self.calls.append(list(messages))
        self.options.append(options)
        for i in range(0, len(self.reply), self.piece):
            time.sleep(self.delay)
            self.yielded += 1
            yield self.reply[i : i + self.piece]
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        pass


LOCAL_SPEC = "local:qwen2.5-coder-0.5b-instruct"


@pytest.fixture(scope="session")
def local_llm(data_dir: Path) -> Iterator[LocalLLM]:
    """The default local model, loaded once for the session (its GGUF joined into the test data dir)."""
    llm = get_llm(LOCAL_SPEC, Settings(data_dir=data_dir))
    assert isinstance(llm, LocalLLM)
    yield llm
    llm.close()


def extractive_answer_to(cl: Citeline, question: str, *, persona: str = "general") -> Complete:
    """``question`` searched in ``cl`` and answered from its passages with no model, as ``citeline ask``
    with ``CITELINE_LLM=extractive`` answers it (the relevance gate included)."""
    hits = cl.search(question)[: cl.settings.answer_passages]

    async def collect() -> Complete:
        async for event in answer_stream(
            question,
            hits,
            llm=None,
            embedder=cl.embedder,
            numbering=CitationNumbering(),
            persona=persona,
            options=GenerationOptions(temperature=0.0, max_tokens=120, timeout=60.0),
            min_similarity=cl.settings.answer_min_similarity,
        ):
            if isinstance(event, Complete):
                return event
        raise AssertionError(f"no answer to {question!r}")

    return asyncio.run(collect())
