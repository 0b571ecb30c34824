"""Follow-up questions become standalone queries; self-contained questions pass unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from citeline.answer.llm import LLM, GenerationOptions, get_llm
from citeline.chat.rewrite import (
    MAX_KEY_TERMS,
    Rewrite,
    accept_rewrite,
    asked_of_model,
    clean_reply,
    heuristic_rewrite,
    is_follow_up,
    key_terms,
    max_query_chars,
    rewrite,
)
from citeline.chat.store import Turn
from citeline.settings import Settings

PUMP = "How do I prime the centrifugal pump?"


def turn(number: int, query: str, answer: str = "Fill the casing with water [1].") -> Turn:
    return Turn(number=number, question=query, standalone_query=query, answer=answer, cited_chunk_ids=(1,))


@pytest.mark.parametrize(
    "question",
    [
        "How often should it be serviced?",
        "What about the impeller?",
        "And the cost?",
        "Is that safe for children?",
        "What does this mean?",
        "Why?",
        "What is the warranty?",
        "Can they be recycled?",
        "It's leaking, what now?",
        "how about in winter",
        "Tell me more",
    ],
)
def test_questions_that_lean_on_the_conversation_are_follow_ups(question: str) -> None:
    assert is_follow_up(question)


@pytest.mark.parametrize(
    "question",
    [
        PUMP,
        "What is the recommended dose of metformin for adults with kidney disease?",
        "Which documents mention frost damage to the volute?",
        "What is BM25?",
        "What is Kubernetes?",
        "Does a pump that primes without water need a foot valve?",
        "Why does a centrifugal pump need priming before first use?",
    ],
)
def test_self_contained_questions_are_not_follow_ups(question: str) -> None:
    assert not is_follow_up(question)


@pytest.mark.parametrize(
    "question",
    [
        # "it" is the install: it borrowed the previous question's topic.
        "List every step of the install and the variables it needs",
        "What is an elastic stop nut and can it be reused?",
        "How do I prime the pump before it runs?",
        "Does the XR200 shut down when it overheats?",
        # A possessive stands for a noun of its own clause.
        "How does the pump protect its seal?",
    ],
)
def test_a_pronoun_standing_for_a_noun_the_question_names_does_not_make_a_follow_up(question: str) -> None:
    assert not is_follow_up(question)
    assert rewrite(question, [turn(1, PUMP)], llm=None) == Rewrite(question, "unchanged")


@pytest.mark.parametrize(
    "question",
    [
        # The noun before the pronoun is what is asked about, or the documents, or an aspect: not what
        # "it" stands for.
        "What torque does it need?",
        "What is the torque it needs?",
        "Does the warranty cover it?",
        "What does the manual say about it?",
        "What is the dose and is it safe?",
        "What happens when it runs dry?",
        "Where is it stored and how big is it?",
    ],
)
def test_a_pronoun_with_nothing_in_the_question_to_stand_for_still_makes_a_follow_up(question: str) -> None:
    assert is_follow_up(question)
    assert rewrite(question, [turn(1, PUMP)], llm=None).method == "heuristic"


@pytest.mark.parametrize(
    "question",
    [
        # Typed without the apostrophe: "whats" is no topic word.
        "whats the dose?",
        "whats the max dose",
        # A pronoun of two words: "one" after "which", "the latter".
        "which one has the shorter half-life",
        "Is the latter cheaper?",
        # A comparison whose other term the conversation holds.
        "do the same rules apply to SGLT2 inhibitors",
        "can I use synthetic instead",
        "is the Chinchilla paper's conclusion different?",
        "What else should I check?",
        "Is there a step I missed, or anything else",
        # The conversation's document, named by its kind alone.
        "what does the manual say about leak test limits",
        "what does the guideline say about reassessing after each bolus",
        # A fragment that asks nothing itself.
        "for a 15 kg child?",
        "any in marine species?",
        # Quoted words are what is quoted, not what "it" stands for.
        "getting 'port 8080 already in use' when running it",
    ],
)
def test_chat_shorthand_that_leans_on_the_conversation_is_a_follow_up(question: str) -> None:
    assert is_follow_up(question)


@pytest.mark.parametrize(
    "question",
    [
        # The demonstrative introduces what follows it.
        "what does this error mean: connection pool exhausted",
        "what does this error mean: 'Fuser unit error 50.2'",
        # The comparison names both terms; the document is named by its topic or a product.
        "Is paracetamol the same as acetaminophen?",
        "Can ibuprofen be taken instead of aspirin?",
        "How is the sepsis bundle different from the old one in adults",
        "What does the guideline on sepsis say about lactate?",
        "what does the manual say about the water filter for the Lavazza BLUE LB 1100?",
        # A preposition that opens a question which asks for itself.
        "In sepsis, when should antibiotics start?",
        "whats the recommended dose of metformin for adults",
    ],
)
def test_chat_shorthand_naming_its_own_topic_is_searched_as_asked(question: str) -> None:
    assert not is_follow_up(question)


def test_a_contraction_typed_without_its_apostrophe_is_not_borrowed_as_a_topic() -> None:
    assert heuristic_rewrite("and the side effects?", ["whats the dose of metformin"]) == (
        "and the side effects? (dose metformin)"
    )


SCOPING = "How are documents scoped to a care journey?"
SEARCH = "How does hybrid search rank the passages?"


@pytest.mark.parametrize("previous", [SCOPING, SEARCH])
@pytest.mark.parametrize(
    "question",
    [
        # The subject is named without an article (a product, a mass noun, a plural) and a possessive
        # of the same clause stands for it: "citeline" was taken for a verb's object, and "its" for the
        # conversation's topic ("How does citeline store its data? (documents scoped care journey)").
        "How does citeline store its data?",
        "Where does citeline keep its files?",
        "Can citeline version its documents?",
        "How does hybrid search combine its scores?",
        "Does reranking change its order?",
        "How do scopes restrict their documents?",
        "Can scopes restrict their documents?",
        "Will the status change its colour?",
        # "it" in a later clause stands for what the first clause names.
        "What is pgvector and how does it work?",
        "Does pgvector slow down when it builds an index?",
        "How is data stored and who can read it?",
        "What is known about caching and when does it expire?",
        # An imperative names its subject as an object, or in the clause it asks about.
        "Explain how citeline stores its data",
        "Tell me how scopes restrict their documents",
        "Explain pgvector and how it ranks results",
    ],
)
def test_a_question_naming_its_own_subject_is_searched_as_asked(question: str, previous: str) -> None:
    assert not is_follow_up(question)
    assert rewrite(question, [turn(1, previous)], llm=None) == Rewrite(question, "unchanged")


@pytest.mark.parametrize("previous", [SCOPING, SEARCH])
@pytest.mark.parametrize(
    "question",
    [
        "And how is it stored?",
        "What about its versions?",
        "Does that apply to PDFs too?",
        "Why?",
        "How is its data stored?",
        "What are its limits?",
        "How does it store its data?",
        "How does citeline store it?",
        "How do I configure its timeout?",
        "Explain how it stores its data",
        "Where are they kept?",
        # The noun before the pronoun cannot be what it stands for: a plural ("do users") for "its",
        # a participle ("is needed") or a state ("has changed") for anything.
        "What do users see on its page?",
        # After a modal, which says nothing of number, the plural's own ending does.
        "Can users change its settings?",
        "Should operators log its readings?",
        "What is needed and where is it kept?",
        "What is wrong and how do I fix it?",
        "What has changed in its schema?",
    ],
)
def test_a_question_leaning_on_the_conversation_is_searched_with_its_topic(
    question: str, previous: str
) -> None:
    assert is_follow_up(question)
    result = rewrite(question, [turn(1, previous)], llm=None)
    assert result.method == "heuristic"
    assert result.query.startswith(question + " (")
    assert ("care journey" if previous == SCOPING else "hybrid search") in result.query


@pytest.mark.parametrize(
    ("question", "rewritten", "asked"),
    [
        # The heuristic's parentheses hold search terms: the model is asked what the user asked.
        (
            "How often should it be serviced?",
            Rewrite("How often should it be serviced? (prime centrifugal pump)", "heuristic"),
            "How often should it be serviced?",
        ),
        # A model's rewrite is a question; parentheses it added are opened, the user's own kept.
        (
            "What size are they?",
            Rewrite("What is the size (of the M10 bolts)?", "llm"),
            "What is the size of the M10 bolts?",
        ),
        (
            "Does it lower LDL (in mice)?",
            Rewrite("Does aspirin lower LDL (in mice)?", "llm"),
            "Does aspirin lower LDL (in mice)?",
        ),
        ("What is BM25?", Rewrite("What is BM25?", "unchanged"), "What is BM25?"),
    ],
)
def test_the_answering_model_is_asked_a_question_without_the_rewrite_s_parentheses(
    question: str, rewritten: Rewrite, asked: str
) -> None:
    assert asked_of_model(question, rewritten) == asked


METFORMIN = "What is the recommended dose of metformin for adults with kidney disease?"
# (previous question, next question, whether the next one leans on the previous): hand-written pairs
# measuring both directions, generic questions that name no topic of their own and new questions that
# use the same aspect words about a topic they name.
PAIRS = [
    (METFORMIN, "What dose should be used?", True),
    (METFORMIN, "How long does it take?", True),
    (METFORMIN, "Is it safe for children?", True),
    (METFORMIN, "What about the side effects?", True),
    (METFORMIN, "What are the side effects?", True),
    (METFORMIN, "Is the usual dose safe for elderly patients?", True),
    (METFORMIN, "When should the dose be reduced?", True),
    (PUMP, "What is the recommended maximum?", True),
    (PUMP, "How much does it cost?", True),
    (METFORMIN, "What are the side effects of statins?", False),
    (METFORMIN, "Is ibuprofen safe for children?", False),
    (METFORMIN, "How long should antibiotics be taken?", False),
    (METFORMIN, "What dose of aspirin prevents heart attacks?", False),
    (METFORMIN, "Do statins reduce the risk of stroke?", False),
    (PUMP, "What is the maximum pressure of the HX-4000?", False),
    # A thing given with "the" and little else is the conversation's: the pump's controller, its valve.
    (PUMP, "How do I reset the controller?", True),
    (PUMP, "Where is the drain valve?", True),
    (PUMP, "What is a drain valve?", False),
    (PUMP, "Which fertiliser suits tomato seedlings?", False),
]


@pytest.mark.parametrize(("previous", "question", "leans"), PAIRS)
def test_a_question_naming_no_topic_of_its_own_is_searched_with_the_previous_one(
    previous: str, question: str, leans: bool
) -> None:
    result = rewrite(question, [turn(1, previous)], llm=None)
    if leans:
        assert result.method == "heuristic"
        assert result.query.startswith(question)
        topic = "metformin" if previous == METFORMIN else "centrifugal"
        assert topic in result.query
    else:
        assert result == Rewrite(question, "unchanged")


def test_a_follow_up_with_a_pronoun_gets_the_previous_topic() -> None:
    assert (
        heuristic_rewrite("How often should it be serviced?", [PUMP])
        == "How often should it be serviced? (prime centrifugal pump)"
    )


def test_terms_already_in_the_question_are_not_borrowed_again() -> None:
    # "pumps" is the same keyword as "pump" once stemmed.
    assert heuristic_rewrite("What about the pumps' impeller?", [PUMP]) == (
        "What about the pumps' impeller? (prime centrifugal)"
    )


def test_a_self_contained_question_is_unchanged_even_with_history() -> None:
    question = "What is the recommended dose of metformin for adults?"
    assert heuristic_rewrite(question, [PUMP]) == question
    assert rewrite(question, [turn(1, PUMP)], llm=None).method == "unchanged"


def test_the_first_question_is_never_rewritten() -> None:
    result = rewrite("How often should it be serviced?", [], llm=None)
    assert result.query == "How often should it be serviced?"
    assert result.method == "unchanged"


def test_the_topic_carries_across_several_follow_ups() -> None:
    first = rewrite("How often should it be serviced?", [turn(1, PUMP)], llm=None)
    assert first.method == "heuristic"
    second = rewrite("And what does that cost?", [turn(1, PUMP), turn(2, first.query)], llm=None)
    assert "centrifugal" in second.query
    assert "pump" in second.query
    assert second.query.startswith("And what does that cost?")


def test_the_latest_turn_with_a_topic_is_the_one_borrowed_from() -> None:
    history = [PUMP, "Which fertiliser suits tomato seedlings?", "Thanks!"]
    assert (
        heuristic_rewrite("How much of it?", history) == "How much of it? (fertiliser suits tomato seedlings)"
    )


def test_a_follow_up_naming_a_code_of_its_own_borrows_what_was_asked_not_the_earlier_codes() -> None:
    # A repair trial: "And 737-00-1028?" was searched as "And 737-00-1028? (part 5520-1100-08 E5100)",
    # and answered about the earlier part.
    history = ["What is the torque for part 5520-1100-08?"]
    assert heuristic_rewrite("And 737-00-1028?", history) == "And 737-00-1028? (torque part)"
    # Nothing but the code to borrow: the new code is searched alone.
    assert heuristic_rewrite("What about E5101?", ["What does E5100 mean?"]) == "What about E5101?"
    # Without a code of its own, the follow-up borrows the code with the rest.
    assert heuristic_rewrite("And the nut?", history) == "And the nut? (torque part 5520-1100-08)"


def test_nothing_to_borrow_leaves_the_question_as_asked() -> None:
    assert heuristic_rewrite("Why?", ["Thanks!", "ok"]) == "Why?"


def test_key_terms_keep_their_written_form_order_and_bound() -> None:
    text = "Does LDL-C lowering with statins reduce COVID-19 mortality in adults over 65 years old"
    terms = key_terms(text)
    assert terms[:4] == ["LDL-C", "lowering", "statins", "reduce"]
    assert len(terms) == MAX_KEY_TERMS


def test_a_model_reply_is_reduced_to_the_query_line() -> None:
    question = "How often should it be serviced?"
    assert clean_reply(
        'Standalone query: "How often should a centrifugal pump be serviced?"\n', question
    ) == ("How often should a centrifugal pump be serviced?")
    # The packaged 0.5B model quotes its label with the query.
    assert clean_reply('"Standalone query: Who invented the elastic stop nut?"', question) == (
        "Who invented the elastic stop nut?"
    )
    assert clean_reply("\n\n  pump service interval\nBecause the user asked...", question) == (
        "pump service interval"
    )


def test_an_empty_or_overlong_model_reply_is_refused() -> None:
    question = "And the cost?"
    assert clean_reply("   \n", question) is None
    assert clean_reply('""', question) is None
    essay = "The cost of servicing a centrifugal pump depends on " + "many factors, " * 30
    assert len(essay) > max_query_chars(question)
    assert clean_reply(essay, question) is None


def test_a_model_that_cannot_be_reached_leaves_the_heuristic_to_rewrite(tmp_path: Path) -> None:
    # A real provider pointed at a port where nothing listens: the failure users meet when a server is down.
    settings = Settings(data_dir=tmp_path, llm_base_url="http://127.0.0.1:1/v1")
    llm = get_llm("openai:any-model", settings)
    try:
        result = rewrite(
            "How often should it be serviced?", [turn(1, PUMP)], llm=llm, options=GenerationOptions(timeout=5)
        )
    finally:
        llm.close()
    assert result == Rewrite("How often should it be serviced? (prime centrifugal pump)", "heuristic", True)


def test_a_self_contained_question_never_calls_the_model(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, llm_base_url="http://127.0.0.1:1/v1")
    llm = get_llm("openai:any-model", settings)
    try:
        result = rewrite("What is the recommended dose of metformin?", [turn(1, PUMP)], llm=llm)
    finally:
        llm.close()
    # Not a fallback: the unreachable model was never asked.
    assert result == Rewrite("What is the recommended dose of metformin?", "unchanged", False)


# Replies the packaged 0.5B model gave to these follow-ups: the check keeps the one real rewrite.
SEAL = "What about its mechanical seal?"
PUMP_ANSWER = "Fill the casing with clean water through the priming plug until water flows from the vent [1]."


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("How often should it be serviced?", "servicing"),  # resolved nothing
        (SEAL, "fill the casing with clean water through the priming plug until water flows from the vent"),
        ("And the cost?", "How do I prime the centrifugal pump?"),  # an earlier question, copied
        ("How much of it per plant?", "plant size"),  # the topic dropped
        ("Is that safe for children?", "Is that safe for children?"),  # repeated as asked
    ],
)
def test_a_model_query_that_resolves_nothing_or_loses_the_question_is_refused(
    question: str, reply: str
) -> None:
    history = [turn(1, PUMP, PUMP_ANSWER), turn(2, "Which fertiliser suits tomato seedlings?")]
    assert not accept_rewrite(reply, question, history)


def test_a_model_query_that_keeps_the_question_and_resolves_it_is_accepted() -> None:
    pump = [turn(1, PUMP, PUMP_ANSWER)]
    assert accept_rewrite(
        "Is it safe for children to use a centrifugal pump?", "Is that safe for children?", pump
    )
    assert accept_rewrite(
        "How often should a centrifugal pump be serviced?", "How often should it be serviced?", pump
    )
    # The referent may come from the answer alone.
    metformin = [turn(1, "What does it do?", "Metformin lowers blood glucose [1].")]
    assert accept_rewrite(
        "How long does metformin take to work?", "How long does that take to work?", metformin
    )


@pytest.fixture(scope="module")
def local_llm(data_dir: Path) -> Iterator[LLM]:
    llm = get_llm("local:qwen2.5-coder-0.5b-instruct", Settings(data_dir=data_dir))
    yield llm
    llm.close()


@pytest.mark.slow
@pytest.mark.parametrize("question", [SEAL, "Is that safe for children?", "And the cost?"])
def test_with_the_packaged_model_every_follow_up_carries_the_topic(local_llm: LLM, question: str) -> None:
    result = rewrite(question, [turn(1, PUMP, PUMP_ANSWER)], llm=local_llm)
    assert result.method == "llm" or (result.method == "heuristic" and result.fell_back)
    assert "pump" in result.query.lower()


def test_a_turn_the_documents_could_not_answer_gives_no_topic() -> None:
    refused = Turn(
        number=2,
        question="What is the capital of France?",
        standalone_query="What is the capital of France?",
        answer="No passage in the documents matches this question closely enough ...",
        cited_chunk_ids=(),
        answered=False,
    )

    assert rewrite("How often should it be serviced?", [turn(1, PUMP), refused], llm=None) == Rewrite(
        "How often should it be serviced? (prime centrifugal pump)", "heuristic"
    )
    # With nothing answered yet, the question is searched as asked.
    assert rewrite("How often should it be serviced?", [refused], llm=None) == Rewrite(
        "How often should it be serviced?", "unchanged"
    )


@pytest.mark.parametrize(
    "said", ["Thanks!", "Thank you very much.", "ok", "Great, thanks!", "Got it", "Cheers"]
)
def test_a_thank_you_or_an_acknowledgement_is_taken_as_said(said: str) -> None:
    # "Thanks!" was searched as "Thanks! (prime centrifugal pump)" and answered with the pump again.
    assert not is_follow_up(said)
    assert rewrite(said, [turn(1, PUMP)], llm=None) == Rewrite(said, "unchanged")


def test_the_way_a_claim_was_put_is_no_topic_to_borrow() -> None:
    # "Is it true that ..." asks; "true" named no topic, yet it was searched for with the next
    # follow-up: "And what about children? (true maximum dose metformin 2000 mg)".
    assert (
        heuristic_rewrite(
            "And what about children?", ["Is it true that the maximum dose of metformin is 2000 mg?"]
        )
        == "And what about children? (maximum dose metformin 2000 mg)"
    )
    assert heuristic_rewrite(
        "And what about children?", ["And is it the case that metformin lowers glucose?"]
    ) == ("And what about children? (metformin lowers glucose)")
