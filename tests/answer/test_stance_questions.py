"""Verdicts on questions asked yes or no: the classifier reads the statement the question asks about.

Real text of the user guide in a real store, found by real search and judged by the packaged
classifier. Judged as the question itself, "Does citeline send anything over the network?" was
answered "Yes: the sources say so" over "... The packaged models run in the process and never fetch
anything.", and "Can I use Chroma instead of pgvector?" was answered "No" over the section saying
how to: a question cannot be contradicted, and its margin stayed near the threshold whatever the
passage said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citeline.answer.stance import claim_of, statement_of
from citeline.engine import Citeline
from tests.conftest import write

from .conftest import extractive_answer_to

# The guide's own words (docs/ at commit b858757, which bench/guide_answers.py asks about).
GUIDE = {
    "configuration.md": """# Configuration

## What goes over the network

Nothing, unless you configure it: the PostgreSQL server you name in `CITELINE_DATABASE_URL`, a
Chroma server or Chroma Cloud (`CITELINE_VECTOR_BACKEND=chroma` with a host), Redis for workers,
remote providers (`openai:`, `ollama:`, `anthropic:`), and the web pages you ingest by URL. The
packaged models run in the process and never fetch anything.

## Vector backends

`CITELINE_VECTOR_BACKEND=pgvector` (the default) keeps each vector in its chunk's row: a version's
chunks and vectors commit in one transaction and are deleted together. `chroma` keeps them in Chroma,
for teams that already run it; everything else stays in PostgreSQL, and chunk ids tie the two.
""",
    "ingesting.md": """# Ingesting

## Versions

**A version that a conversation cites is kept.** An answer's citation names a document version, a
page and a character span, and links to the stored original. So that it keeps opening exactly what
it cited, a previous version that a live conversation cites is not deleted when a new version is
swapped in: it becomes `superseded`. A superseded version is never searched and holds only what its
citations need: the chunks of the pages they are on (their text, without vectors or keyword
entries) and its stored original.
""",
    "scopes.md": """# Scopes

## The scope rule

A document has zero, one or several scopes.

- A document with **no scope is universal**: every search sees it, whatever scopes the search
  names.
- A document **with scopes** is seen by a search that names at least one of its scopes.
- A search that names **no scope** is not restricted by scope at all: it sees every document in the
  namespace, scoped or not.

A document can belong to several scopes, for example a letter that concerns two related journeys.
""",
}


@pytest.fixture
def guide(cl: Citeline, tmp_path: Path) -> Citeline:
    for name, text in GUIDE.items():
        write(tmp_path / "docs" / name, text)
    cl.ingest([tmp_path / "docs"])
    return cl


@pytest.mark.parametrize(
    ("question", "verdict"),
    [
        # The passage says no in words the question does not use: "never", "not", "nothing".
        ("Do the packaged models fetch anything from the internet?", "contradicts"),
        ("Is a superseded version searched?", "contradicts"),
        # ... and yes, where the question says "without" and the passage "no scope".
        ("Does a search without a scope see every document?", "supports"),
        ("Does a document without a scope show up in every scoped search?", "supports"),
        ("Can a document belong to several scopes?", "supports"),
    ],
)
def test_a_question_asked_yes_or_no_gets_the_answer_the_guide_gives(
    guide: Citeline, question: str, verdict: str
) -> None:
    done = extractive_answer_to(guide, question)

    assert done.verdict == verdict, done.answer
    assert done.answer.startswith("Yes:" if verdict == "supports" else "No:"), done.answer


def test_a_passage_answering_under_a_condition_gets_neither_yes_nor_no(guide: Citeline) -> None:
    # "Nothing, unless you configure it: ..." answers "it depends"; it was answered "Yes".
    done = extractive_answer_to(guide, "Does citeline send anything over the network?")

    assert done.verdict == "not_enough_evidence", done.answer
    opening = "The sources do not clearly say yes or no. Nothing, unless you configure it"
    assert done.answer.startswith(opening), done.answer


@pytest.mark.parametrize(
    ("question", "statement"),
    [
        ("Does citeline send anything over the network?", "Citeline send anything over the network."),
        ("Is a superseded version searched?", "A superseded version is searched."),
        ("Can I use Chroma instead of pgvector?", "I can use Chroma instead of pgvector."),
        ("Is it safe to run the pump dry?", "It is safe to run the pump dry."),
        ("Is it safe to run the pump dry or not?", "It is safe to run the pump dry."),
        ("Can elastic stop nuts be reused?", "Elastic stop nuts can be reused."),
        ("Has the version been superseded?", "The version has been superseded."),
        # No verb found after the subject: the auxiliary is left out, the rest read as a statement.
        ("Is the default chunk size 800 characters?", "The default chunk size 800 characters."),
        ("And does aspirin lower LDL?", "Aspirin lower LDL."),
        # A statement, and a claim put as "Is it true that ...", are judged as they are.
        ("Aspirin lowers LDL.", "Aspirin lowers LDL."),
        ("Is it true that aspirin lowers LDL?", "aspirin lowers LDL"),
    ],
)
def test_the_classifier_reads_a_yes_no_question_as_the_statement_it_asks_about(
    question: str, statement: str
) -> None:
    claim = claim_of(question)

    assert claim is not None and statement_of(claim) == statement
