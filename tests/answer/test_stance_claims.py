"""Which questions put a claim to the evidence: a yes/no question only when it names what it is about."""

from __future__ import annotations

import pytest

from citeline.answer.stance import claim_of


@pytest.mark.parametrize(
    "question",
    [
        # Its subject points back to an earlier turn: "they" are nothing the classifier can read, and
        # "Can they be reused?" was answered "Yes: the sources support this claim".
        "Can they be reused?",
        "And can they be reused?",
        "Is it safe at high heat?",
        "Does it upset the stomach?",
        "Do they need a torque wrench?",
        "Has he been told?",
        "Does it need to be replaced?",
        "Can it be reused if the collar is worn?",
    ],
)
def test_a_yes_no_question_about_something_it_does_not_name_puts_no_claim(question: str) -> None:
    assert claim_of(question) is None


@pytest.mark.parametrize(
    "question",
    [
        "Can elastic stop nuts be reused?",
        "Does aspirin inhibit PGE2?",
        # "it" stands for what follows, which the question names.
        "Is it safe to run the pump dry?",
        "Is it possible that the seal fails within seconds?",
        "Would it be safe to reuse an elastic stop nut?",
        # A pronoun later in the question is no subject.
        "Does metformin cause it?",
    ],
)
def test_a_yes_no_question_naming_its_subject_puts_itself(question: str) -> None:
    assert claim_of(question) == question


@pytest.mark.parametrize(
    ("question", "claim"),
    [
        (
            'Is the valve set at 3,000 psi? <img src=x onerror="window.pwned=9">',
            "Is the valve set at 3,000 psi?",
        ),
        ("<b>Does aspirin inhibit PGE2?</b>", "Does aspirin inhibit PGE2?"),
        (
            "Is it true that <i>metformin</i> lowers glucose?<script>x = 9</script>",
            "metformin lowers glucose",
        ),
        # Comparisons are no markup.
        ("Is the pressure <10 bar and >2 bar?", "Is the pressure <10 bar and >2 bar?"),
    ],
)
def test_markup_in_a_question_is_no_part_of_its_claim(question: str, claim: str) -> None:
    assert claim_of(question) == claim


@pytest.mark.parametrize("said", ["Thanks!", "Great, thanks!", "Got it!", "Wow!"])
def test_a_short_exclamation_puts_no_claim(said: str) -> None:
    # "Thanks!" got "The sources neither clearly support nor contradict this claim." A short claim is
    # judged when it ends with its full stop.
    assert claim_of(said) is None


def test_a_long_exclamation_still_puts_its_claim() -> None:
    assert claim_of("Aspirin lowers the risk of heart attack!") == "Aspirin lowers the risk of heart attack!"


@pytest.mark.parametrize(
    "question",
    [
        # Put as a claim, a subject pointing back is as unreadable as in a yes/no question: after "What
        # is an elastic stop nut?", both got "Yes: the sources support this claim", judged on "they".
        "Is it true that they can be reused?",
        "And is it true that it softens above 250 degrees F?",
        "They can be reused.",
        "It lowers blood glucose in adults.",
    ],
)
def test_a_claim_about_something_it_does_not_name_puts_no_claim(question: str) -> None:
    assert claim_of(question) is None


@pytest.mark.parametrize(
    ("question", "claim"),
    [
        ("Is it true that it is safe to run the pump dry?", "it is safe to run the pump dry"),
        ("It is unsafe to reuse an elastic stop nut.", "It is unsafe to reuse an elastic stop nut."),
        # Contracted, with more words before "to", or "it takes": the same "it" (11ae105 dropped them).
        ("It's unsafe to reuse an elastic stop nut.", "It's unsafe to reuse an elastic stop nut."),
        (
            "It is generally considered unsafe to reuse an elastic stop nut.",
            "It is generally considered unsafe to reuse an elastic stop nut.",
        ),
        ("It takes 24 hours for the epoxy to cure.", "It takes 24 hours for the epoxy to cure."),
        (
            "Is it true that their collar softens above 250 degrees F?",
            "their collar softens above 250 degrees F",
        ),
    ],
)
def test_an_it_standing_for_what_follows_still_names_the_claims_subject(question: str, claim: str) -> None:
    assert claim_of(question) == claim


@pytest.mark.parametrize(
    "question",
    [
        # Asks which, not whether: answered "Yes: the sources say so [1]." on the user guide.
        "Should I use scopes or namespaces to keep two clinics apart?",
        "Is pgvector or Chroma faster for a million chunks?",
        "Do I ingest a folder with --scope or with --category?",
        "Is the M10 or the M12 bolt larger?",
    ],
)
def test_a_question_offering_alternatives_puts_no_claim(question: str) -> None:
    assert claim_of(question) is None


@pytest.mark.parametrize(
    "question",
    [
        "Is it safe to run the pump dry or not?",
        # An "or" inside what is claimed offers no choice: these are claims to judge.
        "Does aspirin reduce the risk of heart attack or stroke?",
        "Is metformin safe for patients with kidney or liver disease?",
    ],
)
def test_a_yes_no_question_whose_or_is_part_of_the_claim_still_puts_it(question: str) -> None:
    assert claim_of(question) == question


def test_an_identifier_in_angle_brackets_is_no_markup() -> None:
    assert claim_of("Is error <E42> fatal?") == "Is error <E42> fatal?"
    assert claim_of("Does the <HX-4000> reach 16 bar?") == "Does the <HX-4000> reach 16 bar?"
