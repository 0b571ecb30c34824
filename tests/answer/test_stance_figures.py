"""Verdicts on claims that state a bare figure (a threshold, a ratio, a score): a passage stating other
figures, and never the claim's, is about another value and does not bear out a "Yes".

Real text in a real store, found by real search and judged by the packaged classifier, which does not
compare numbers: over the user guide's section on the search's distance threshold ("`--threshold 0.6`
keeps hits with a similarity of at least 0.4"), "Is it true that the relevance gate threshold is 0.25?"
was answered "Yes: the sources support this claim".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citeline.answer import Complete
from citeline.answer.nli import default_judge
from citeline.answer.prompt import select_passages
from citeline.answer.quantities import figures
from citeline.answer.stance import assess, claim_of
from citeline.answer.support import VectorCache
from citeline.engine import Citeline
from tests.conftest import write

from .conftest import extractive_answer_to

# docs/search.md, as the guide says it.
SEARCH_GUIDE = """# Search

## Distance threshold

`--threshold D` (or `CITELINE_DISTANCE_THRESHOLD`) drops every hit whose cosine distance to the
query is larger than `D`. The threshold is applied after fusion and before reranking and the top-k
cut, and it applies to every hit, including chunks found only by the keyword search. `--threshold 0.6` keeps
hits with a similarity of at least 0.4.

With a threshold a search can return fewer than top-k hits, or none; the command then prints
`no hits` (or `[]` with `--json`). Good values depend on the model and the collection; look at the
similarities of hits you judge relevant and irrelevant before you pick one. The value must lie
between 0 and 2.
"""


def ask(cl: Citeline, question: str) -> Complete:
    return extractive_answer_to(cl, question, persona="general")


@pytest.fixture
def guide(cl: Citeline, tmp_path: Path) -> Citeline:
    write(tmp_path / "search.md", SEARCH_GUIDE)
    cl.ingest([tmp_path])
    return cl


def test_a_passage_stating_other_figures_than_the_claim_s_does_not_support_it(guide: Citeline) -> None:
    done = ask(guide, "Is it true that the relevance gate threshold is 0.25?")

    assert done.verdict == "not_enough_evidence", done.answer
    assert done.answer.startswith(
        "The sources neither clearly support nor contradict this claim: it states 0.25, where the source "
        "states 0.6"
    ), done.answer
    assert all(c.stance == "neutral" for c in done.citations)


@pytest.mark.parametrize(
    "question",
    [
        # The claim's figures, stated by the passage.
        "Is it true that `--threshold 0.6` keeps hits with a similarity of at least 0.4?",
        "Is it true that the distance threshold must lie between 0 and 2?",
        # No figure in the claim.
        "Is it true that the distance threshold is applied after fusion?",
        # A year, a reference and a p-value are not figures of the claim.
        "Is it true that the distance threshold was introduced in 2019 [3]?",
        "Is it true that the distance threshold improves precision (p < 0.05)?",
    ],
)
def test_figures_the_passage_states_or_that_are_no_values_leave_the_verdict_to_the_classifier(
    guide: Citeline, question: str
) -> None:
    claim = claim_of(question)
    assert claim is not None
    passages = select_passages(guide.search(question)[: guide.settings.answer_passages])
    cache = VectorCache(guide.embedder)
    judge = default_judge()

    checked = assess(claim, passages, judge, cache)
    unchecked = assess(claim, passages, judge, cache, compare_quantities=False)

    assert checked.disagreements == {}, checked.disagreements
    assert checked.verdict == unchecked.verdict


@pytest.mark.parametrize(
    "text",
    [
        "In 2015, the HX-4000 and the XR200 replaced the CP-40 [12].",
        "See Figure 3, Table 2 and page 17 of the 2nd edition; type 1 diabetes.",
        "The effect was significant (p < 0.05).",
        "Incidence of 10/66 dementia; proteins of 23, 15 and 216 kD; 120/80 mmHg.",
    ],
)
def test_years_labels_references_p_values_codes_and_listed_quantities_are_no_bare_figures(text: str) -> None:
    assert figures(text) == []


def test_a_number_without_a_unit_that_is_a_value_is_a_bare_figure() -> None:
    assert [f.text for f in figures("The gate's threshold is 0.25; keep at least 0.4.")] == [
        "0.25",
        "at least 0.4",
    ]
