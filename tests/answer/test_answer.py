"""Answers as a stream of events: renumbered, cleaned tokens; verified citations; the extractive fallback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

import pytest

from citeline.answer import (
    NO_PASSAGES,
    CitationEvent,
    CitationNumbering,
    Complete,
    Error,
    Event,
    Start,
    Token,
    UnsupportedClaim,
    answer_stream,
)
from citeline.answer.answer import answer
from citeline.answer.llm import AnswerShape, GenerationOptions
from citeline.answer.prompt import REFUSAL
from citeline.embed import Embedder
from citeline.errors import GenerationError, InvalidRequestError
from citeline.retrieve.search import Hit

from .conftest import ScriptedLLM, make_hit, pump_hits

OPTIONS = GenerationOptions(temperature=0.0, max_tokens=256, timeout=30.0)
PRIME, DRY, FROST, MOTOR = 101, 102, 103, 104
QUESTION = "How do I prime the pump, and what must I never do?"


def run(
    llm: ScriptedLLM | None,
    embedder: Embedder,
    *,
    evidence: Sequence[Hit] | None = None,
    numbering: CitationNumbering | None = None,
    options: GenerationOptions = OPTIONS,
    max_evidence_tokens: int | None = None,
    question: str = QUESTION,
    persona: str = "repair",
) -> list[Event]:
    async def collect() -> list[Event]:
        return [
            event
            async for event in answer_stream(
                question,
                pump_hits() if evidence is None else evidence,
                llm=llm,
                embedder=embedder,
                numbering=CitationNumbering() if numbering is None else numbering,
                persona=persona,
                options=options,
                max_evidence_tokens=max_evidence_tokens,
            )
        ]

    return asyncio.run(collect())


def tokens(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, Token))


def completed(events: list[Event]) -> Complete:
    assert isinstance(events[-1], Complete), events[-1]
    return events[-1]


def test_the_stream_shows_conversation_numbers_without_structure_headings_or_references(
    embedder: Embedder,
) -> None:
    model = ScriptedLLM(
        "## Answer\n\n**Answer:** Open the vent plug and fill the casing with water until it overflows [1]. "
        "Never run the pump dry, it destroys the seal [2][7].\n\n"
        "## References\n[1] Pump manual (p. 1)\n[3] Pump manual"
    )
    numbering = CitationNumbering([FROST])

    events = run(model, embedder, numbering=numbering)

    assert isinstance(events[0], Start)
    assert [p.chunk_id for p in events[0].passages] == [PRIME, DRY, FROST, MOTOR]
    shown = tokens(events)
    assert shown == (
        "Open the vent plug and fill the casing with water until it overflows [2]. "
        "Never run the pump dry, it destroys the seal [3]."
    )
    done = completed(events)
    assert done.answer == shown
    assert [(c.number, c.chunk_id) for c in done.citations] == [(2, PRIME), (3, DRY)]
    # Each number is announced right after the token it first appears in: with its whole passage, as
    # no earlier turn cited these chunks.
    announced = [e for e in events if isinstance(e, CitationEvent)]
    assert [(e.number, e.passage and e.passage.chunk_id) for e in announced] == [(2, PRIME), (3, DRY)]
    for event in announced:
        before = events[: events.index(event)]
        assert f"[{event.number}]" in tokens(before)
        assert f"[{event.number}]" not in tokens(before[:-1])
    assert all(c.supported for c in done.citations)
    assert [(r.number, r.occurrences) for r in done.removed] == [(7, 1)]
    assert (done.provider, done.fell_back, done.stream_replaced, done.evidence_missing) == (
        "scripted:test",
        False,
        False,
        False,
    )
    assert numbering.chunk_ids == [FROST, PRIME, DRY]
    assert done.cited_chunk_ids == [PRIME, DRY]
    # Events are ready to be sent as JSON lines or server-sent events.
    json.dumps([e.as_dict() for e in events])


def test_the_model_gets_the_persona_and_the_numbered_evidence(embedder: Embedder) -> None:
    model = ScriptedLLM("Open the vent plug [1].")

    run(model, embedder)

    [(system, user)] = model.calls
    assert "repair technician" in system.content
    assert user.content.startswith(f"Sources:\n\n[1] Pump manual\n{pump_hits()[0].text}\n\n")
    assert user.content.endswith(f"Question: {QUESTION}")
    # A model that can hold its reply to cited sentences is told how many passages there are.
    [options] = model.options
    assert options.shape == AnswerShape(passages=4, sentences=3, refusal=REFUSAL, not_opening="Source")
    assert (options.temperature, options.max_tokens, options.timeout) == (0.0, 256, 30.0)


def test_with_a_budget_the_model_reads_the_best_sentences_and_citations_resolve_to_whole_chunks(
    embedder: Embedder,
) -> None:
    model = ScriptedLLM("Fill the casing with clean water until it overflows. [1]")

    events = run(model, embedder, max_evidence_tokens=60)

    start = events[0]
    assert isinstance(start, Start)
    assert [p.chunk_id for p in start.passages][:2] == [PRIME, DRY]
    assert all(p.truncated for p in start.passages if len(p.text) > 100)
    user = model.calls[0][1].content
    assert "fill the casing with clean water until it overflows" in user
    assert "residual current device" not in user  # the motor page's best sentence, cut to its share
    assert start.as_dict()["passages"][0]["shown"] == [
        [10 + s, 10 + e] for s, e in start.passages[0].shown or ()
    ]
    [citation] = completed(events).citations
    assert (citation.chunk_id, citation.start, citation.end) == (PRIME, 10, 10 + len(pump_hits()[0].text))


def test_passages_the_budget_leaves_out_are_given_unread_and_the_fallback_may_quote_them(
    embedder: Embedder,
) -> None:
    model = ScriptedLLM(REFUSAL)
    question = "What is the motor rated, and how do I drain the volute in winter?"

    events = run(model, embedder, max_evidence_tokens=40, question=question, persona="general")

    start = events[0]
    assert isinstance(start, Start)
    read = [p for p in start.passages if p.shown != ()]
    unread = [p for p in start.passages if p.shown == ()]
    assert unread, "a 40-token budget reads fewer than four passages"
    assert sorted(p.chunk_id for p in start.passages) == [PRIME, DRY, FROST, MOTOR]
    assert [p.number for p in start.passages] == [1, 2, 3, 4]  # the ones read first
    user = model.calls[0][1].content
    assert all(f"[{p.number}] " in user for p in read)
    assert not any(f"[{p.number}] " in user for p in unread)
    done = completed(events)
    assert done.fell_back
    assert {c.chunk_id for c in done.citations} & {p.chunk_id for p in unread}


def test_empty_evidence_is_said_plainly_and_never_reaches_the_model(embedder: Embedder) -> None:
    model = ScriptedLLM("Invented answer [1].")

    events = run(model, embedder, evidence=[])

    assert model.calls == []
    # Nothing found at all (filters that match no document): said so, not "not close enough".
    assert tokens(events) == NO_PASSAGES and "check the scope and the filters" in NO_PASSAGES
    done = completed(events)
    assert done.evidence_missing and done.answer == NO_PASSAGES
    assert done.citations == () and not done.fell_back


def test_a_model_error_before_any_output_falls_back_to_a_streamed_extractive_answer(
    embedder: Embedder,
) -> None:
    model = ScriptedLLM(error=GenerationError("local:qwen: model file is corrupt"))
    numbering = CitationNumbering()

    events = run(model, embedder, numbering=numbering)

    done = completed(events)
    assert done.fell_back and done.provider == "extractive"
    assert done.fallback_reason == "generation failed: local:qwen: model file is corrupt"
    assert not done.stream_replaced and tokens(events) == done.answer
    assert "open the vent plug on top of the volute and fill the casing" in done.answer
    assert done.citations and all(c.chunk_id in {PRIME, DRY, FROST, MOTOR} for c in done.citations)
    assert numbering.chunk_ids == done.cited_chunk_ids


def test_a_model_failing_midway_is_replaced_and_leaves_no_numbers_behind(embedder: Embedder) -> None:
    model = ScriptedLLM(
        "Drain the volute in winter [3]. Then", error=GenerationError("server closed the connection")
    )
    numbering = CitationNumbering()

    events = run(model, embedder, numbering=numbering)

    done = completed(events)
    assert tokens(events).startswith("Drain the volute in winter [1].")
    assert done.fell_back and done.stream_replaced
    assert done.answer != tokens(events)
    # Only what the final answer cites is numbered: the failed reply's [3] did not keep number 1.
    assert numbering.chunk_ids == done.cited_chunk_ids
    assert [c.number for c in done.citations] == list(range(1, len(done.citations) + 1))


def test_a_reply_without_a_valid_citation_falls_back_to_extractive(embedder: Embedder) -> None:
    # Nothing the passages back (or nothing at all) is left once the invalid citations are removed.
    for reply in ("Aspirin lowers the risk of a heart attack.", "Prime the pump [7].", "Sources: [1]"):
        events = run(ScriptedLLM(reply), embedder)

        done = completed(events)
        assert done.fell_back, reply
        assert done.fallback_reason == (
            "the model's reply cited no given passage, and no passage backs its sentences"
        )
        assert done.citations and done.answer.endswith("].")


def test_a_reply_whose_every_citation_is_unbacked_is_replaced_by_the_extractive_answer(
    embedder: Embedder,
) -> None:
    # What a 0.5B model does with a question its passages do not answer: it copies the prompt's example.
    events = run(ScriptedLLM("Aspirin lowers the risk of a heart attack in older adults [2]."), embedder)

    done = completed(events)
    assert done.fell_back and done.stream_replaced
    assert done.fallback_reason == "no sentence of the model's reply is backed by the passage it cites"
    assert done.citations and all(c.supported for c in done.citations)
    assert "Aspirin" not in done.answer


def test_a_reply_with_one_backed_sentence_stands_and_its_unbacked_one_is_flagged(embedder: Embedder) -> None:
    reply = "Never run the pump dry, it destroys the seal [2]. Aspirin lowers the risk of a heart attack [1]."

    done = completed(run(ScriptedLLM(reply), embedder))

    assert not done.fell_back
    # Conversation numbers in order of first citation: the reply's [2] is 1, its [1] is 2.
    assert [u.text for u in done.unsupported] == ["Aspirin lowers the risk of a heart attack [2]."]


def test_a_sentence_giving_a_year_its_passage_does_not_write_is_flagged_or_cited_where_it_is_written(
    embedder: Embedder,
) -> None:
    first = make_hit(41, "The pump's seal design was introduced in 2009 and is used on every model since.")
    second = make_hit(42, "The pump's frost guard was introduced in 2007 after cracked casings.", page=2)
    question = "When were the seal design and frost guard introduced?"

    # Before the full stop the model's citation has been shown: it stays, flagged.
    flagged = completed(
        run(
            ScriptedLLM(
                "The seal design was introduced in 2009 [1]. The seal design was introduced in 2011 [1]."
            ),
            embedder,
            evidence=[first, second],
            question=question,
        )
    )
    # After it, the citation waits: the year's passage is cited instead.
    moved = completed(
        run(
            ScriptedLLM(
                "The seal design was introduced in 2009. [1] The frost guard was introduced in 2007. [1]"
            ),
            embedder,
            evidence=[first, second],
            question=question,
        )
    )

    assert not flagged.fell_back
    assert [u.text for u in flagged.unsupported] == ["The seal design was introduced in 2011 [1]."]
    assert not moved.fell_back and moved.unsupported == ()
    assert moved.answer.endswith("The frost guard was introduced in 2007. [2]"), moved.answer
    assert [(c.chunk_id, c.attributed) for c in moved.citations] == [(41, False), (42, True)]


def test_a_chunk_cited_in_an_earlier_turn_is_announced_by_number_and_unbacked_sentences_are_flagged(
    embedder: Embedder,
) -> None:
    reply = "Never run the pump dry, it destroys the seal [2]. Aspirin lowers the risk of a heart attack [1]."
    numbering = CitationNumbering([DRY])

    events = run(ScriptedLLM(reply), embedder, numbering=numbering)

    announced = [e.as_dict() for e in events if isinstance(e, CitationEvent)]
    assert announced[0] == {"type": "citation", "number": 1, "stance": "neutral", "passage": None}
    assert announced[1]["number"] == 2 and announced[1]["passage"]["chunk_id"] == PRIME
    assert announced[1]["passage"]["text"] == pump_hits()[0].text
    flags = [e for e in events if isinstance(e, UnsupportedClaim)]
    done = completed(events)
    assert [f.sentence for f in flags] == list(done.unsupported)
    assert [f.as_dict()["text"] for f in flags] == ["Aspirin lowers the risk of a heart attack [2]."]
    # The flags come once the answer is checked: after the last token, before Complete.
    last_token = max(i for i, e in enumerate(events) if isinstance(e, Token))
    assert last_token < events.index(flags[0]) < len(events) - 1


def test_a_reply_of_citations_alone_falls_back_to_extractive(embedder: Embedder) -> None:
    events = run(ScriptedLLM("[1]"), embedder)

    done = completed(events)
    assert done.fell_back
    assert done.fallback_reason == "the model's reply made no statement with a citation"
    assert done.stream_replaced and tokens(events) == "[1]"


def test_a_silent_model_times_out_into_the_fallback(embedder: Embedder) -> None:
    model = ScriptedLLM("Open the vent plug [1].", delay=2.0)

    started = time.perf_counter()
    events = run(model, embedder, options=GenerationOptions(timeout=0.3))

    assert time.perf_counter() - started < 1.9
    done = completed(events)
    assert done.fell_back
    assert (
        done.fallback_reason == "generation failed: scripted:test: no output for 0.3 s (CITELINE_LLM_TIMEOUT)"
    )


def test_without_a_model_the_extractive_answer_is_the_answer(embedder: Embedder) -> None:
    events = run(None, embedder)

    done = completed(events)
    assert isinstance(events[0], Start) and events[0].provider == "extractive"
    assert done.provider == "extractive" and not done.fell_back
    assert tokens(events) == done.answer
    assert done.timings.first_token is not None and done.timings.generation == 0.0


def test_the_event_loop_keeps_running_while_the_model_generates(embedder: Embedder) -> None:
    model = ScriptedLLM("Open the vent plug and fill the casing [1].", piece=4, delay=0.05)

    async def main() -> tuple[int, Complete]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        events = [
            e
            async for e in answer_stream(
                QUESTION,
                pump_hits(),
                llm=model,
                embedder=embedder,
                numbering=CitationNumbering(),
                persona="general",
                options=OPTIONS,
            )
        ]
        done.set()
        await task
        return ticks, completed(events)

    ticks, complete = asyncio.run(main())

    # About 0.55 s of generation: a blocked loop would tick once or twice.
    assert ticks >= 20
    assert complete.timings.generation >= 500
    assert (
        complete.timings.first_token is not None
        and complete.timings.first_token < complete.timings.generation
    )


def test_leaving_the_stream_early_stops_the_model(embedder: Embedder) -> None:
    model = ScriptedLLM(
        "Open the vent plug and fill the casing with water until it overflows [1]. " * 5, delay=0.02
    )

    async def main() -> None:
        stream = answer_stream(
            QUESTION,
            pump_hits(),
            llm=model,
            embedder=embedder,
            numbering=CitationNumbering(),
            persona="general",
            options=OPTIONS,
        )
        async for event in stream:
            if isinstance(event, Token):
                break
        await stream.aclose()
        await asyncio.sleep(0.2)

    asyncio.run(main())
    stopped_at = model.yielded
    time.sleep(0.2)

    assert model.yielded == stopped_at
    assert stopped_at < len(model.reply) // model.piece


def test_the_sync_answer_gives_the_complete_event(embedder: Embedder) -> None:
    numbering = CitationNumbering([MOTOR])

    done = answer(
        QUESTION,
        pump_hits(),
        llm=ScriptedLLM("Fill the casing with water until it overflows [1]."),
        embedder=embedder,
        numbering=numbering,
        persona="general",
        options=OPTIONS,
    )

    assert done.answer == "Fill the casing with water until it overflows [2]."
    assert numbering.chunk_ids == [MOTOR, PRIME]


def test_an_unknown_persona_fails_before_the_stream_starts(embedder: Embedder) -> None:
    with pytest.raises(InvalidRequestError, match="unknown persona 'poet'"):
        answer(
            QUESTION,
            pump_hits(),
            llm=ScriptedLLM("x"),
            embedder=embedder,
            numbering=CitationNumbering(),
            persona="poet",
            options=OPTIONS,
        )


def test_a_failure_after_the_start_is_an_error_event(embedder: Embedder) -> None:
    class BrokenEmbedder:
        model_id = "onnx:broken"
        dimension = 384
        max_tokens = 256

        def embed(self, texts: Sequence[str]) -> object:
            from citeline.errors import EmbeddingError

            raise EmbeddingError("onnx:broken: the model session is gone")

    events = run(ScriptedLLM("Open the vent plug and fill the casing."), BrokenEmbedder())  # type: ignore[arg-type]

    assert isinstance(events[0], Start)
    assert isinstance(events[-1], Error)
    assert events[-1].message == "onnx:broken: the model session is gone"
    assert events[-1].as_dict()["http_status"] == 503

    # Focusing the evidence embeds it before anything starts: then the error is all there is.
    focused = run(ScriptedLLM("x"), BrokenEmbedder(), max_evidence_tokens=60)  # type: ignore[arg-type]

    assert [type(e) for e in focused] == [Error]


def test_a_reply_that_only_repeats_the_questions_words_is_replaced_by_the_extractive_answer(
    embedder: Embedder,
) -> None:
    # The packaged model's reply to the follow-up "Can it be reused?", searched (and asked) as "Can it
    # be reused? (Boots self-locking nut work)": every word of it is the question's, and it scored 0.74
    # against the passage about the nut, so it stood as the answer.
    nut = make_hit(
        5,
        "The Boots self-locking nut is of one piece, all-metal construction designed to hold tight despite "
        "severe vibration. Only a wrench applied to the nut loosens it. The nut can be removed and reused "
        "without impairing its efficiency.",
    )
    question = "Can it be reused? (Boots self-locking nut work)"

    for reply in ("The Boots self-locking nut work. [1]", "Boots self-locking nut: it can be reused [1]."):
        done = completed(run(ScriptedLLM(reply), embedder, evidence=[nut], question=question))

        assert (
            done.fell_back and done.fallback_reason == "the model's reply only repeats the question's words"
        )
        assert "The nut can be removed and reused without impairing its efficiency [1]." in done.answer

    # A reply that says something of its own stands.
    reply = "The nut can be removed and reused without impairing its efficiency [1]."
    done = completed(run(ScriptedLLM(reply), embedder, evidence=[nut], question=question))
    assert not done.fell_back and done.answer == reply


def test_a_reply_picking_one_of_the_alternatives_a_question_offers_is_no_echo(embedder: Embedder) -> None:
    # Made of the question's words, as the answer to a choice is: it was replaced as an echo.
    bolts = make_hit(6, "The M12 flange bolt is larger than the M10 flange bolt and takes 85 N·m.")
    question = "Which is larger, the M10 or the M12 flange bolt?"
    reply = "The M12 flange bolt is larger [1]."

    done = completed(run(ScriptedLLM(reply), embedder, evidence=[bolts], question=question))

    assert not done.fell_back and done.answer == reply


def test_a_reply_quoting_the_whole_question_from_a_command_is_replaced_and_the_command_never_quoted(
    embedder: Embedder,
) -> None:
    # make demo's answer: the guide shows the command that asks the demo's question, the packaged model
    # quoted it ('... ask "how do I keep ...?" is a command-line tool ...'), and its citation scored 0.83;
    # the extractive answer quoted the command line too, as a sentence of the passage.
    question = "how do I keep documents of one care journey apart from another?"
    guide = make_hit(
        7,
        "### Run the demo\n\n```sh\nmake demo\n```\n\nThis ingests the guide and asks one question:"
        "\n\n```sh\n"
        f'.venv/bin/citeline search "{question}" --top-k 3\n.venv/bin/citeline ask "{question}"\n```\n',
    )
    scopes = make_hit(
        8,
        "To keep the documents of one care journey apart from another, give each care journey its own scope "
        "when you ingest its documents, and name that scope when you search.",
        page=2,
    )
    reply = f'.venv/bin/citeline ask "{question}" is a command-line tool used to ask questions [1].'

    done = completed(run(ScriptedLLM(reply), embedder, evidence=[guide, scopes], question=question))

    assert done.fell_back and done.fallback_reason == "the model's reply only repeats the question's words"
    assert "give each care journey its own scope" in done.answer
    assert "citeline ask" not in done.answer


def test_a_reply_restating_a_claim_whole_and_judging_it_stands(embedder: Embedder) -> None:
    # A claim is no question: a reply may restate it whole before saying what the passage found.
    claim = "Running the pump dry destroys the mechanical seal within seconds"
    seal = make_hit(
        9, "Never run the pump dry. Running without water destroys the mechanical seal within seconds."
    )
    reply = f"{claim}: the manual says running without water destroys the seal within seconds [1]."

    done = completed(run(ScriptedLLM(reply), embedder, evidence=[seal], question=claim))

    assert not done.fell_back, done.fallback_reason
