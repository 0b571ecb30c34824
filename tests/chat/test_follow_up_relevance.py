"""A follow-up is answered only when the passages hold something of what the user newly asked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from citeline.answer import EVIDENCE_MISSING, Complete
from citeline.answer.llm import LLM, get_llm
from citeline.chat.events import ChatEvent
from citeline.chat.session import ChatSession
from citeline.engine import Citeline
from citeline.settings import Settings
from tests.conftest import write

DOCUMENTS = {
    "nuts.md": (
        "# Elastic stop nuts\n\n"
        "An elastic stop nut has a fibre or nylon collar that grips the bolt thread and keeps the nut "
        "from loosening under vibration. Do not use elastic stop nuts where the temperature exceeds "
        "250 degrees F, because the collar softens. An elastic stop nut may be reused only if the collar "
        "still resists turning by hand. At least one full thread of the bolt must protrude through the "
        "nut after tightening.\n"
    ),
    "hydraulics.md": (
        "# Hydraulic system\n\n"
        "The relief valve opens at 3,000 psi and returns fluid to the reservoir. Check the reservoir "
        "level before each flight.\n"
    ),
    "metformin.md": (
        "# Metformin\n\n"
        "Metformin lowers blood glucose in type 2 diabetes. The usual starting dose of metformin is 500 mg "
        "twice daily with meals, raised by 500 mg each week to at most 2000 mg. Nausea and diarrhoea are "
        "common side effects in the first weeks.\n"
    ),
}


@pytest.fixture
def documents(cl: Citeline, tmp_path: Path) -> Citeline:
    for name, text in DOCUMENTS.items():
        write(tmp_path / name, text)
    cl.ingest([tmp_path])
    return cl


def turn(session: ChatSession, question: str) -> Complete:
    async def run() -> list[ChatEvent]:
        return [event async for event in session.ask(question)]

    last = asyncio.run(run())[-1]
    assert isinstance(last, Complete), last
    return last


NUT = "What is an elastic stop nut?"
DRUG = "What does metformin treat?"


@pytest.mark.parametrize(
    ("first", "follow_up", "quoted"),
    [
        (NUT, "Can they be reused?", "may be reused only if the collar"),
        (NUT, "What temperature limit applies to them?", "exceeds 250 degrees F"),
        (NUT, "How many threads must show?", "must protrude through the nut"),
        (NUT, "And the relief valve?", "The relief valve opens at 3,000 psi"),
        # No topic words of its own: the conversation's topic answers it.
        (NUT, "How are they used?", "An elastic stop nut has a fibre or nylon collar"),
        (NUT, "Why?", "An elastic stop nut has a fibre or nylon collar"),
        (DRUG, "What dose should be used?", "The usual starting dose of metformin is 500 mg"),
        (DRUG, "And its side effects?", "common side effects"),
        (DRUG, "And the relief valve?", "The relief valve opens at 3,000 psi"),
        # In other words than the passage's.
        (NUT, "Is it safe at high heat?", "exceeds 250 degrees F"),
        (DRUG, "How much should I take?", "The usual starting dose of metformin is 500 mg"),
        (DRUG, "Does it upset the stomach?", "Nausea and diarrhoea"),
        # A measure the passage states in its units, without naming it.
        ("What does the relief valve do?", "What pressure does it open at?", "opens at 3,000 psi"),
    ],
)
def test_a_follow_up_the_earlier_topic_s_passages_answer_is_answered(
    documents: Citeline, first: str, follow_up: str, quoted: str
) -> None:
    session = ChatSession.start(documents, llm=None)
    turn(session, first)

    done = turn(session, follow_up)

    assert session.last_rewrite is not None and session.last_rewrite.method == "heuristic"
    assert not done.evidence_missing and quoted in done.answer, done.answer


def test_a_yes_no_follow_up_about_what_an_earlier_turn_named_gets_an_answer_not_a_verdict(
    documents: Citeline,
) -> None:
    session = ChatSession.start(documents, llm=None)
    turn(session, NUT)

    done = turn(session, "Can they be reused?")

    # "They" are the nuts of the first turn, which the classifier never sees: judged as it stands, the
    # question got "Yes: the sources support this claim", a verdict on nothing it could read.
    assert done.claim is None and done.verdict is None
    assert done.answer.startswith("An elastic stop nut may be reused only if the collar"), done.answer


@pytest.mark.parametrize(
    ("first", "follow_up"),
    [
        (NUT, "What are the risks?"),
        (NUT, "And what is the capital of France?"),
        (NUT, "And the risks of smoking?"),
        (NUT, "What about its colour?"),
        (NUT, "Who invented it?"),
        (NUT, "What is the weather like?"),
        # "Do not use elastic stop nuts ..." holds "use", which names no topic.
        (NUT, "What dose should be used?"),
        (DRUG, "What is it made of?"),
        # A measure the passage neither names nor states: its sentence on tightening is at 0.40 to it.
        (NUT, "What torque should be used for them?"),
        (NUT, "How much do they weigh?"),
    ],
)
def test_a_follow_up_only_the_borrowed_topic_words_match_gets_the_evidence_missing_answer(
    documents: Citeline, first: str, follow_up: str
) -> None:
    session = ChatSession.start(documents, llm=None)
    assert not turn(session, first).evidence_missing

    done = turn(session, follow_up)

    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "heuristic" and rewritten.query != follow_up
    # Searched as "What are the risks? (elastic stop nut)", the borrowed words matched the nut's
    # passage (similarity 0.61) and the answer quoted the nut's sentences again.
    assert done.evidence_missing and done.answer == EVIDENCE_MISSING and not done.citations, done.answer


@pytest.mark.parametrize("earlier", [[NUT], []])
def test_a_question_whose_topic_no_passage_names_is_refused_though_near_in_meaning(
    documents: Citeline, earlier: list[str]
) -> None:
    session = ChatSession.start(documents, llm=None)
    for question in earlier:
        turn(session, question)

    done = turn(session, "What torque should be used?")

    # Not a follow-up (it names its topic), searched as asked: the nut's passage, at similarity 0.27
    # to it and saying nothing of torque, passed the floor of 0.25 and was quoted.
    assert session.last_rewrite is not None and session.last_rewrite.method == "unchanged"
    assert done.evidence_missing and done.answer == EVIDENCE_MISSING and not done.citations, done.answer


@pytest.fixture(scope="module")
def local_llm(data_dir: Path) -> Iterator[LLM]:
    llm = get_llm("local:qwen2.5-coder-0.5b-instruct", Settings(data_dir=data_dir))
    yield llm
    llm.close()


@pytest.mark.slow
def test_a_follow_up_the_model_rewrote_is_held_to_the_user_s_own_words_too(
    documents: Citeline, local_llm: LLM
) -> None:
    # The packaged model rewrites follow-ups when the setting asks it to (auto leaves it to the heuristic).
    settings = documents.settings.model_copy(update={"follow_up_rewrite": "llm"})
    with Citeline(settings) as cl:
        first = ChatSession.start(cl, llm=None)
        turn(first, NUT)
        session = ChatSession.resume(cl, first.id, llm=local_llm)

        done = turn(session, "What are the risks?")

    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "llm" and "nut" in rewritten.query, rewritten
    # Searched as the model's "elastic stop nut risks", the nut's passage was relevant to the query, the
    # user's "risks" was never checked, and the answer quoted the nut again (with the keyword query
    # judged as a claim: "Yes: the sources support this claim").
    assert done.evidence_missing and done.answer == EVIDENCE_MISSING and done.claim is None, done.answer


@pytest.mark.parametrize("refused", ["What is the capital of France?", "What are the risks?"])
def test_a_follow_up_after_a_refused_turn_takes_the_topic_last_answered(
    documents: Citeline, refused: str
) -> None:
    session = ChatSession.start(documents, llm=None)
    turn(session, NUT)
    assert turn(session, refused).evidence_missing

    done = turn(session, "Can they be reused?")

    # The refused turn's topic is not the conversation's: "Can they be reused?" was searched as
    # "Can they be reused? (capital France)", or "(risks elastic stop nut)", the refused question's
    # words first, though nothing was said about them.
    assert session.last_rewrite is not None
    assert session.last_rewrite.query == "Can they be reused? (elastic stop nut)"
    assert "may be reused only if the collar" in done.answer, done.answer


def test_a_thank_you_is_not_answered_with_the_last_answer_again_and_lends_no_topic(
    documents: Citeline,
) -> None:
    session = ChatSession.start(documents, llm=None)
    turn(session, NUT)

    thanks = turn(session, "Thanks!")

    # Searched as "Thanks! (elastic stop nut)", it was judged as a claim ("The sources neither clearly
    # support nor contradict this claim.") and the nut's sentences quoted again.
    assert thanks.claim is None and thanks.evidence_missing, thanks.answer
    done = turn(session, "Can they be reused?")
    assert session.last_rewrite is not None
    assert session.last_rewrite.query == "Can they be reused? (elastic stop nut)"
    assert "may be reused only if the collar" in done.answer, done.answer
