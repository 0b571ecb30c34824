"""Whether retrieved passages can answer a question at all, before any model reads them.

Search always returns its best hits, however far they are from the question: asked "how do I bake
bread?", a store of pump manuals returns its least unrelated passages, and a model given them writes
an answer from them. So citeline checks the evidence first. It may answer when some passage is close
to the question in meaning (cosine similarity at least ``min_similarity``) or holds at least
:data:`MIN_TERM_SHARE` of the question's content terms: error codes and part numbers ("E42") match by
their words while their embeddings may be far apart. Otherwise citeline says that the documents hold
no evidence, and no model is called.

The default floor, 0.25 for the packaged MiniLM embedder, was measured on questions with and without
an answer in two corpora (SciFact's 300 claims asked as "Is it true that ...?" against its 5,183
abstracts; 10 questions about the user guide against ``docs/``; and 15 and 110 questions from the
other corpus or off every topic): every question with an answer passed (their best similarity was
0.353 at the lowest), and 101 of 125 without one were refused. Another embedder needs its own floor.
"""

from __future__ import annotations

from collections.abc import Sequence

from citeline.answer.support import content_terms
from citeline.retrieve.search import Hit

MIN_TERM_SHARE = 0.5
"""A passage holding at least this share of the question's content terms may answer it, whatever its
similarity."""


def answerable(question: str, evidence: Sequence[Hit], *, min_similarity: float) -> bool:
    """Whether ``evidence`` may answer ``question`` (see the module docstring); 0 always says yes
    when there is evidence."""
    if not evidence:
        return False
    if min_similarity <= 0 or any(hit.similarity >= min_similarity for hit in evidence):
        return True
    terms = content_terms(question)
    if not terms:
        return False
    return any(len(terms & content_terms(hit.text)) >= MIN_TERM_SHARE * len(terms) for hit in evidence)
