"""How :mod:`citeline.metrics` counts an answer: by its events as the library streams them (the API's
counts over a real server: tests/api/test_metrics.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from citeline.answer import Complete, Error, Token
from citeline.answer.events import AnswerTimings
from citeline.errors import InvalidRequestError
from citeline.metrics import counted_answer, metrics

Event = Token | Complete | Error


def complete(*, fell_back: bool) -> Complete:
    return Complete(
        answer="It opens at 6 bar [1].",
        citations=(),
        removed=(),
        unsupported=(),
        uncited=(),
        provider="local",
        fell_back=fell_back,
        fallback_reason="the model cited nothing" if fell_back else None,
        stream_replaced=False,
        evidence_missing=False,
        timings=AnswerTimings(prompt=1.0, first_token=2.0, generation=3.0, verify=1.0, total=5.0),
    )


async def events(*sent: Event, refuse: bool = False) -> AsyncGenerator[Event, None]:
    if refuse:
        raise InvalidRequestError("the question is empty")
    for event in sent:
        await asyncio.sleep(0)
        yield event


def counts() -> dict[str, float]:
    registry = metrics().registry
    names = {
        "started": ("citeline_answers_started_total", {}),
        "finished": ("citeline_answers_ended_total", {"outcome": "finished"}),
        "stopped_early": ("citeline_answers_ended_total", {"outcome": "stopped_early"}),
        "failed": ("citeline_answers_ended_total", {"outcome": "failed"}),
        "fell_back": ("citeline_answers_fell_back_total", {}),
        "first_token": ("citeline_answer_first_token_seconds_count", {}),
        "durations": ("citeline_answer_duration_seconds_count", {}),
    }
    return {key: registry.get_sample_value(name, labels) or 0.0 for key, (name, labels) in names.items()}


def test_an_answer_is_counted_by_how_it_ends() -> None:
    async def read_all(stream: AsyncGenerator[Event, None]) -> None:
        async for _ in stream:
            pass

    async def read_one_and_close(stream: AsyncGenerator[Event, None]) -> None:
        await anext(stream)
        await stream.aclose()

    async def refused(stream: AsyncGenerator[Event, None]) -> None:
        try:
            await anext(stream)
        except InvalidRequestError:
            return
        raise AssertionError("the refusal was swallowed")

    before = counts()
    asyncio.run(read_all(counted_answer(events(Token("It "), Token("opens."), complete(fell_back=False)))))
    asyncio.run(read_all(counted_answer(events(complete(fell_back=True)))))
    asyncio.run(read_all(counted_answer(events(Token("It "), Error("the model failed")))))
    asyncio.run(
        read_one_and_close(counted_answer(events(Token("It "), Token("opens."), complete(fell_back=False))))
    )
    asyncio.run(refused(counted_answer(events(refuse=True))))
    after = counts()
    delta = {key: after[key] - before[key] for key in after}
    # The refused question is no answer; the others began, and each ended one way.
    assert delta == {
        "started": 4,
        "finished": 2,
        "stopped_early": 1,
        "failed": 1,
        "fell_back": 1,
        "first_token": 3,
        "durations": 2,
    }
