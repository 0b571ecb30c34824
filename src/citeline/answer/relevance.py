"""Whether retrieved passages can answer a question at all, before any model reads them.

Search always returns its best hits, however far they are from the question: asked "how do I bake
bread?", a store of pump manuals returns its least unrelated passages, and a model given them writes
an answer from them. So citeline checks the evidence first. It may answer when some passage is close
to the question in meaning (cosine similarity at least ``min_similarity``) or has a sentence holding
at least :data:`MIN_TERM_SHARE` of the question's content terms, two of them at least or one of its
identifiers: error codes and part numbers ("E42") match by their words while their embeddings may be
far apart, while one everyday word in common ("capital", "time") says nothing. Otherwise citeline says
that the documents hold no evidence, and no model is called.

The default floor, 0.25 for the packaged MiniLM embedder, was measured on questions with and without
an answer in two corpora (SciFact's 300 claims asked as "Is it true that ...?" against its 5,183
abstracts; 10 questions about the user guide against ``docs/``; and 15 and 110 questions from the
other corpus or off every topic): every question with an answer passed (their best similarity was
0.353 at the lowest), and 101 of 125 without one were refused. Another embedder needs its own floor.

Most off-topic questions that pass come in by words, not meaning: over ``docs/`` and three PDF
fixtures, 13 of 25 general-knowledge questions ("what is the capital of France", "who wrote Hamlet")
passed on one shared word at similarities of 0.07 to 0.23. Asking for two words in one sentence, or an
identifier, refused 10 of them; 25 questions about those documents and the first 150 SciFact claims
all still pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citeline.answer.support import content_terms, sentence_spans
from citeline.retrieve.search import Hit

MIN_TERM_SHARE = 0.5
"""A passage with a sentence holding at least this share of the question's content terms may answer it,
whatever its similarity, when the sentence holds :data:`MIN_SHARED_TERMS` of them or an identifier."""

MIN_SHARED_TERMS = 2
"""One everyday word in common is no evidence: "what is the capital of France?" shared "capital" with
a guide that says "capitalised", half of its two terms, and was answered from it. An identifier is
enough alone ("What does E42 mean?")."""

# A code or part number (letters and digits: E42, XR200, COVID-19) or an acronym (NICS, BM25).
_IDENTIFIER = re.compile(r"\b(?=[^\W_]*\d)(?=[^\W_]*[^\W\d_])[^\W_]+\b|\b[A-Z]{2,}\b")


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
    identifiers = {t for word in _IDENTIFIER.findall(question) for t in content_terms(word)}

    def holds(sentence: str) -> bool:
        shared = terms & content_terms(sentence)
        enough = len(shared) >= MIN_SHARED_TERMS or bool(shared & identifiers)
        return enough and len(shared) >= MIN_TERM_SHARE * len(terms)

    return any(holds(hit.text[s:e]) for hit in evidence for s, e in sentence_spans(hit.text))
