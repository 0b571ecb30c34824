"""Verdicts on claims and stances on citations: stated first, carried by every event, never unbacked."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Sequence
from dataclasses import replace

import pytest

from citeline.answer import CitationEvent, CitationNumbering, Complete, Event, Token, answer_stream
from citeline.answer.answer import EXTRACTIVE
from citeline.answer.llm import GenerationOptions
from citeline.answer.nli import NliJudge
from citeline.answer.prompt import Passage
from citeline.answer.providers.local import LocalLLM
from citeline.answer.stance import (
    STANCES,
    Judgement,
    Stance,
    asks_yes_no,
    claim_of,
    verdict_of,
    verdict_sentence,
)
from citeline.answer.support import VectorCache
from citeline.embed import Embedder
from citeline.errors import GenerationError
from citeline.retrieve.search import Hit
from tests.conftest import SHARED

from .conftest import ScriptedLLM, make_hit, pump_hits

OPTIONS = GenerationOptions(temperature=0.0, max_tokens=120, timeout=60.0)
PRIME, DRY, FROST, MOTOR = 101, 102, 103, 104
CLAIM = "Running the pump dry destroys its seal."


class ScriptedJudge:
    """Plays a stance classifier's output: a fixed stance per chunk id (neutral margins otherwise)."""

    model_id = "scripted:judge"

    def __init__(self, stances: dict[int, Stance], *, error: GenerationError | None = None) -> None:
        self.stances = stances
        self.error = error
        self.judged: list[int] = []

    def judge(self, claim: str, passage: Passage, cache: VectorCache) -> Judgement:
        if self.error is not None:
            raise self.error
        self.judged.append(passage.chunk_id)
        stance = self.stances.get(passage.chunk_id, "supports")
        return Judgement(stance=stance, margin=0.0 if stance == "supports" else 9.0)


def run(
    llm: ScriptedLLM | LocalLLM | None,
    embedder: Embedder,
    judge: ScriptedJudge | NliJudge,
    *,
    question: str = f"Is it true that {CLAIM[0].lower()}{CLAIM[1:-1]}?",
    evidence: Sequence[Hit] | None = None,
    numbering: CitationNumbering | None = None,
    options: GenerationOptions = OPTIONS,
) -> list[Event]:
    async def collect() -> list[Event]:
        return [
            e
            async for e in answer_stream(
                question,
                about_the_claim() if evidence is None else evidence,
                llm=llm,
                embedder=embedder,
                numbering=numbering if numbering is not None else CitationNumbering(),
                persona="general",
                options=options,
                max_evidence_tokens=150,
                judge=judge,
            )
        ]

    return asyncio.run(collect())


def about_the_claim() -> list[Hit]:
    """The pump manual's pages, the one about running dry (and so about :data:`CLAIM`) ranked first."""
    hits = pump_hits()
    return [hits[1], hits[0], *hits[2:]]


def completed(events: list[Event]) -> Complete:
    assert isinstance(events[-1], Complete), events[-1]
    return events[-1]


def test_claims_and_yes_no_questions_put_a_claim_and_open_questions_do_not() -> None:
    assert claim_of("Is it true that aspirin inhibits PGE2?") == "aspirin inhibits PGE2"
    assert claim_of("Does aspirin inhibit PGE2?") == "Does aspirin inhibit PGE2?"
    assert claim_of("Aspirin inhibits PGE2.") == "Aspirin inhibits PGE2."
    assert claim_of("How do I prime the pump?") is None
    assert claim_of("What is the motor rated?") is None


@pytest.mark.parametrize(
    ("asked", "claim"),
    [
        # A follow-up's opening word does not change what it asks or claims.
        ("And what error code should I check?", None),
        ("So how often is it serviced?", None),
        ("And does aspirin lower blood pressure?", "does aspirin lower blood pressure?"),
        ("Is it true that metformin lowers blood pressure?", "metformin lowers blood pressure"),
        # "it" points to an earlier turn: nothing the classifier can read (test_stance_claims).
        ("Is it true that it lowers blood pressure?", None),
        # A claim's own closing parenthesis is part of it.
        ("Vitamin D prevents fractures (over 70)", "Vitamin D prevents fractures (over 70)"),
        # Requests ask for something; they claim nothing.
        ("Please list the side effects", None),
        ("List the side effects of aspirin.", None),
        ("Explain how the seal fails", None),
        # A question told as a statement asks; it claims nothing.
        (
            "My patient weighs 45 kg and drinks, so I would like to know the most paracetamol I can give "
            "in a day and how long to wait between doses.",
            None,
        ),
        ("I wonder whether the seal survives a dry run.", None),
        ("Could you tell me if aspirin lowers blood pressure.", None),
        ("The manual must tell the fitter the torque.", "The manual must tell the fitter the torque."),
        # ... but a statement that merely starts like one is still a claim.
        ("Listeria infection causes meningitis.", "Listeria infection causes meningitis."),
        # A wh-word after a preposition, with or without the question mark, asks an open question.
        ("At what pressure does the relief valve open", None),
        ("For how long is the pump primed?", None),
        ("In which ward is the infusion pump serviced", None),
        ("In diabetes, metformin lowers HbA1c.", "In diabetes, metformin lowers HbA1c."),
        ("And", None),
        # A keyword search claims nothing ...
        ("nuts", None),
        ("elastic stop nut", None),
        ("and the XR300", None),
        # ... but a short statement with its full stop does.
        ("DUSP4 increases apoptosis.", "DUSP4 increases apoptosis."),
    ],
)
def test_a_follow_ups_opening_words_do_not_change_what_it_claims_and_keyword_searches_claim_nothing(
    asked: str, claim: str | None
) -> None:
    assert claim_of(asked) == claim


def test_a_verdict_without_a_citation_that_bears_it_out_cannot_be_made(embedder: Embedder) -> None:
    # The verdict is computed from the citations' stances: every verdict but "not enough evidence"
    # names the stances that bear it out, and a citation with each of them is there.
    needs: dict[str, set[Stance]] = {
        "supports": {"supports"},
        "contradicts": {"contradicts"},
        "mixed": {"supports", "contradicts"},
    }
    for size in range(4):
        for stances in itertools.product(STANCES, repeat=size):
            verdict = verdict_of(stances)
            assert needs.get(verdict, set()) <= set(stances), (stances, verdict)
    done = completed(run(None, embedder, ScriptedJudge({DRY: "contradicts"})))
    # A Complete whose citations lose their stances loses its verdict with them.
    assert done.verdict == "contradicts"
    assert replace(done, citations=tuple(replace(c, stance="neutral") for c in done.citations)).verdict == (
        "not_enough_evidence"
    )


def test_the_verdict_comes_first_cites_the_passage_that_bears_it_out_and_every_citation_has_a_stance(
    embedder: Embedder,
) -> None:
    judge = ScriptedJudge({DRY: "supports"})
    model = ScriptedLLM("Running without water destroys the mechanical seal within seconds. [1]")

    events = run(model, embedder, judge, evidence=[pump_hits()[1], *pump_hits()[:1], *pump_hits()[2:]])

    tokens = [e for e in events if isinstance(e, Token)]
    assert tokens[0].text == "Yes: the sources support this claim [1]. "
    done = completed(events)
    assert (done.verdict, done.claim, done.fell_back) == (
        "supports",
        "running the pump dry destroys its seal",
        False,
    )
    assert done.answer == "".join(t.text for t in tokens)
    assert done.answer.startswith("Yes: the sources support this claim [1]. Running without water")
    assert [(c.chunk_id, c.stance) for c in done.citations] == [(DRY, "supports")]
    # Only the best passage the model reads is judged.
    assert judge.judged == [DRY]
    # The stance goes out with the citation event, the verdict with Complete, and both in as_dict().
    [announced] = [e for e in events if isinstance(e, CitationEvent)]
    assert (announced.number, announced.stance) == (1, "supports")
    data = done.as_dict()
    assert data["verdict"] == "supports" and data["citations"][0]["stance"] == "supports"
    json.dumps([e.as_dict() for e in events])
    # The opening's citation is backed by its stance, not its wording: it is never flagged.
    assert done.unsupported == () and done.uncited == ()


def second_study(chunk_id: int, text: str) -> Hit:
    """A passage of another document than the pump manual's."""
    return replace(
        make_hit(chunk_id, text, title="Seal wear study"),
        document_id=uuid.UUID(int=8),
        document_name="seal-wear.pdf",
    )


SECOND = 201
SEAL_STUDY = "In bench tests, pumps run without water lost their mechanical seal within a minute."


def test_another_document_that_bears_out_the_verdict_is_judged_and_cited_with_it(embedder: Embedder) -> None:
    judge = ScriptedJudge({DRY: "supports", SECOND: "supports"})
    evidence = [pump_hits()[1], pump_hits()[0], second_study(SECOND, SEAL_STUDY), *pump_hits()[2:]]

    done = completed(run(None, embedder, judge, evidence=evidence))

    # The best passage, then the best passage of the next other document (not the manual's page 1).
    assert judge.judged == [DRY, SECOND]
    assert done.verdict == "supports"
    assert done.answer.startswith("Yes: the sources support this claim [1, 2].")
    assert {(c.chunk_id, c.stance) for c in done.citations} >= {(DRY, "supports"), (SECOND, "supports")}


def test_a_passage_the_verdict_cites_is_checked_and_quoted_for_the_claim_not_for_the_verdicts_words(
    embedder: Embedder,
) -> None:
    # "Yes: the sources support this claim" is not what any passage says: scored for those words, the
    # seal study, which only the verdict cites, read "not backed by this passage" under a "Yes", and
    # its excerpt was the sentence closest to those words.
    judge = ScriptedJudge({DRY: "supports", SECOND: "supports"})
    model = ScriptedLLM("Running without water destroys the mechanical seal within seconds. [1]")
    study = (
        "Seal wear was measured on 12 pumps over two years of bench tests. "
        "Pumps run without water lost their mechanical seal."
    )
    evidence = [pump_hits()[1], second_study(SECOND, study), *pump_hits()[2:]]

    done = completed(run(model, embedder, judge, evidence=evidence))

    assert done.answer.startswith("Yes: the sources support this claim [1, 2]. Running without water")
    cited = {c.chunk_id: c for c in done.citations}
    assert cited[SECOND].supported
    assert cited[SECOND].excerpt == "Pumps run without water lost their mechanical seal."
    # A passage the answer goes on to cite shows what the answer says it found.
    assert cited[DRY].excerpt == (
        "Running without water destroys the mechanical seal within seconds and voids the warranty."
    )


def test_another_document_that_disagrees_neither_changes_the_verdict_nor_is_cited_for_it(
    embedder: Embedder,
) -> None:
    judge = ScriptedJudge({DRY: "supports", SECOND: "contradicts"})
    evidence = [pump_hits()[1], second_study(SECOND, SEAL_STUDY), *pump_hits()[2:]]

    done = completed(run(None, embedder, judge, evidence=evidence))

    assert judge.judged == [DRY, SECOND]
    assert done.verdict == "supports"
    assert done.answer.startswith("Yes: the sources support this claim [1].")
    assert all(c.stance != "contradicts" for c in done.citations)


def test_another_document_on_another_subject_is_neither_judged_nor_cited(embedder: Embedder) -> None:
    # The judge only tells contradiction from the rest: unasked, it would find this "supporting".
    judge = ScriptedJudge({DRY: "supports"})
    aspirin = "Aspirin lowers the risk of a second heart attack in patients with coronary disease."
    evidence = [pump_hits()[1], second_study(SECOND, aspirin), *pump_hits()[2:]]

    done = completed(run(None, embedder, judge, evidence=evidence))

    assert judge.judged == [DRY]
    assert done.answer.startswith("Yes: the sources support this claim [1].")


def test_a_best_passage_on_another_subject_gives_no_verdict_rather_than_a_yes(embedder: Embedder) -> None:
    # Unasked, the judge would find the aspirin study "supporting" a claim about the pump's seal.
    judge = ScriptedJudge({})
    aspirin = "Aspirin lowers the risk of a second heart attack in patients with coronary disease."
    evidence = [second_study(SECOND, aspirin)]

    done = completed(run(None, embedder, judge, evidence=evidence))

    assert judge.judged == []
    assert done.verdict == "not_enough_evidence"
    assert done.answer.startswith("The sources neither clearly support nor contradict this claim.")
    assert all(c.stance == "neutral" for c in done.citations)


@pytest.mark.parametrize(
    "second",
    [
        # Loosely on the topic: seals and wear, not running dry.
        "Mechanical seals in pumps wear faster when the pump runs hot; dry running was not tested.",
        "Pump seals were inspected after two years; some showed wear.",
        # Squarely on it: still not enough when the best passage says nothing of the claim.
        SEAL_STUDY,
    ],
)
def test_another_document_alone_never_carries_a_verdict_when_the_best_passage_is_neutral(
    embedder: Embedder, second: str
) -> None:
    # The real classifier: it finds every passage that does not contradict "supporting". The best
    # passage (frost) is not about the claim, so nothing is judged and the second document, which
    # could only bear out a verdict the first gave, is not judged either.
    judge = NliJudge()
    evidence = [pump_hits()[2], second_study(SECOND, second), *pump_hits()[3:]]

    done = completed(run(None, embedder, judge, evidence=evidence))

    assert done.verdict == "not_enough_evidence"
    assert done.answer.startswith("The sources neither clearly support nor contradict this claim.")
    assert all(c.stance == "neutral" for c in done.citations), done.citations


def test_a_contradicted_claim_says_no_first_and_a_reply_citing_nothing_gives_way_to_the_extract(
    embedder: Embedder,
) -> None:
    # The model is given no refusal to write for a claim: a reply saying the sources do not answer is
    # a reply that cites nothing, replaced by the extract.
    model = ScriptedLLM("The sources do not answer the question.")
    judge = ScriptedJudge({PRIME: "contradicts"})

    events = run(model, embedder, judge, question="Does the pump need no priming?", evidence=pump_hits())

    done = completed(events)
    # Asked yes or no, the opening answers the question rather than judging "this claim".
    assert done.answer.startswith("No: the sources say otherwise [1]. ")
    assert done.verdict == "contradicts"
    assert done.fell_back and done.stream_replaced
    assert done.fallback_reason == (
        "the model's reply cited no given passage, and no passage backs its sentences"
    )
    assert "do not answer" not in done.answer


def test_for_a_claim_the_model_reads_only_the_passage_that_bears_out_the_verdict_and_cannot_decline(
    embedder: Embedder,
) -> None:
    model = ScriptedLLM("The pump must never run dry. [1]")
    evidence = [pump_hits()[1], *pump_hits()[:1], *pump_hits()[2:]]

    done = completed(run(model, embedder, ScriptedJudge({DRY: "supports"}), evidence=evidence))

    [(system, user)] = model.calls
    assert "do not answer" not in system.content
    assert user.content.startswith("Source:\n\n[1] Pump manual\n")
    assert "[2]" not in user.content and "dry" in user.content.lower()
    [options] = model.options
    assert options.shape is not None and (options.shape.passages, options.shape.refusal) == (1, "")
    assert not done.fell_back and done.provider == "scripted:test"
    assert done.answer == "Yes: the sources support this claim [1]. The pump must never run dry. [1]"


def test_a_reply_the_model_breaks_off_still_ends_in_a_valid_answer_with_the_verdict_and_a_reason(
    embedder: Embedder,
) -> None:
    model = ScriptedLLM(
        "Running without water destroys [", error=GenerationError("server closed the connection")
    )
    numbering = CitationNumbering()

    events = run(model, embedder, ScriptedJudge({DRY: "supports"}), numbering=numbering)

    done = completed(events)
    assert done.fell_back and done.provider == EXTRACTIVE
    assert done.fallback_reason == "generation failed: server closed the connection"
    assert done.answer.startswith("Yes: the sources support this claim [1]. ")
    assert done.verdict == "supports" and done.citations[0].stance == "supports"
    assert numbering.chunk_ids == done.cited_chunk_ids
    # The opening was streamed before the model broke off; the rest was replaced.
    streamed = "".join(e.text for e in events if isinstance(e, Token))
    assert streamed.startswith("Yes: the sources support this claim [1]. ")


def test_a_malformed_reply_falls_back_and_keeps_the_verdict(embedder: Embedder) -> None:
    events = run(ScriptedLLM("[1]"), embedder, ScriptedJudge({DRY: "contradicts"}))

    done = completed(events)
    assert done.fell_back and done.fallback_reason == "the model's reply made no statement with a citation"
    assert done.stream_replaced
    assert done.answer.startswith("No: the sources contradict this claim [1]. ")
    assert done.verdict == "contradicts"


def test_a_judge_that_fails_leaves_the_answer_without_a_verdict(embedder: Embedder) -> None:
    judge = ScriptedJudge({}, error=GenerationError("nli: the model run failed"))

    done = completed(run(ScriptedLLM("Never run the pump dry. [2]"), embedder, judge))

    assert done.claim is None and done.verdict is None
    assert not done.answer.startswith(("Yes", "No"))
    assert all(c.stance == "neutral" for c in done.citations)


def test_an_open_question_gets_no_verdict_and_no_judgement(embedder: Embedder) -> None:
    judge = ScriptedJudge({})

    done = completed(run(None, embedder, judge, question="How do I prime the pump?"))

    assert judge.judged == [] and done.verdict is None and done.as_dict()["verdict"] is None


# Labelled SciFact claims with their gold abstract, read from the shared evaluation folder: two the
# abstract supports, two it contradicts, all clear cases for the classifier (margins far from the
# threshold). How it does on all 150 claims is measured by bench/verdicts.py and `citeline eval`.
SCIFACT = SHARED / "eval"
LABELLED = {"797": "supports", "114": "supports", "98": "contradicts", "802": "contradicts"}


def _labelled_claims() -> list[tuple[str, Hit, str]]:
    claims = SCIFACT / "scifact-claims"
    queries = {
        str(q["_id"]): str(q["text"])
        for q in map(json.loads, (claims / "queries.jsonl").read_text().splitlines())
        if q
    }
    gold = {
        str(e["query_id"]): str(e["doc_id"])
        for e in map(json.loads, (claims / "evidence.jsonl").read_text().splitlines())
        if e
    }
    wanted = {gold[q] for q in LABELLED}
    docs: dict[str, dict[str, str]] = {}
    with (SCIFACT / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            if doc["_id"] in wanted:
                docs[doc["_id"]] = doc
    out = []
    for qid, expected in LABELLED.items():
        doc = docs[gold[qid]]
        hit = make_hit(int(gold[qid]), doc["text"], title=doc["title"])
        out.append((queries[qid], replace(hit, document_id=uuid.UUID(int=int(gold[qid]))), expected))
    return out


@pytest.mark.slow
def test_labelled_claims_get_the_right_verdict_from_their_gold_abstract_written_by_the_local_model(
    embedder: Embedder, local_llm: LocalLLM
) -> None:
    judge = NliJudge()
    # What the model writes is under test, not how fast: on a machine busy with other work the model
    # can be silent for over a minute.
    patient = replace(OPTIONS, timeout=900.0)
    for claim, hit, expected in _labelled_claims():
        question = f"Is it true that {claim.rstrip('.')}?"

        done = completed(run(local_llm, embedder, judge, question=question, evidence=[hit], options=patient))

        assert done.verdict == expected, (claim, done.answer)
        assert done.citations and all(c.stance == expected for c in done.citations), done.citations
        opening = {"supports": "Yes: the sources support", "contradicts": "No: the sources contradict"}
        assert done.answer.startswith(opening[expected]), done.answer
        assert not done.evidence_missing
        # After the verdict, the model wrote what the abstract found, and its citation holds.
        assert not done.fell_back and done.provider == local_llm.model_id, done.fallback_reason
        assert done.unsupported == (), done.answer


def test_the_labelled_claims_are_there() -> None:
    # The slow test above reads the shared folder: fail loudly, not skip, if it moved.
    assert len(_labelled_claims()) == len(LABELLED)


def test_the_classifier_is_opened_from_its_checked_file_and_keeps_no_copy_of_it() -> None:
    # Built from bytes, onnxruntime's wrapper would keep the 87 MB model for the session's life.
    session, _ = NliJudge()._loaded()
    assert getattr(session, "_model_bytes", None) is None
    assert session._model_path is not None and session._model_path.endswith(".onnx")


def test_a_question_asked_yes_or_no_is_answered_yes_or_no_and_a_claim_put_is_judged() -> None:
    # "Can elastic stop nuts be reused?" was answered "Yes: the sources support this claim [1]."
    numbers: dict[Stance, list[int]] = {"supports": [1], "contradicts": [2]}
    assert asks_yes_no("Can elastic stop nuts be reused?") and asks_yes_no("And does aspirin lower LDL?")
    assert not asks_yes_no("Is it true that aspirin lowers LDL?") and not asks_yes_no("Aspirin lowers LDL.")
    assert [verdict_sentence(v, numbers, asked=True) for v in ("supports", "contradicts", "mixed")] == [
        "Yes: the sources say so [1].",
        "No: the sources say otherwise [2].",
        "The sources disagree: some say yes [1], others no [2].",
    ]
    unclear = verdict_sentence("not_enough_evidence", {}, asked=True)
    assert unclear == "The sources do not clearly say yes or no."
    assert verdict_sentence("supports", numbers) == "Yes: the sources support this claim [1]."
