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

Near the floor, meaning alone is no evidence either. MiniLM puts "What torque should be used?" at 0.27
from a passage on elastic stop nuts that never says torque (its sentence on bolt threads at 0.40), and
the nut's sentences were quoted as the answer. So a passage that is relevant by its similarity alone
must also hold one of the question's topic words (words that name no topic, :data:`FILLER` and "use",
excepted), unless its similarity reaches :data:`CLEAR_SIMILARITY` times the floor (0.35; every question
with an answer above reached 0.353). A question with no topic word ("How is it used?") is judged by its
similarity alone. Over ``docs/``, 25 questions about the guide are all still answered, and of 25 off
every topic 4 pass instead of 7 ("What is photosynthesis?" at 0.28 no longer does); all 150 claims of
``scifact-claims`` still pass.

A follow-up in a conversation is searched with terms borrowed from the earlier turns ("What are the
risks? (elastic stop nut)"), and those words alone matched the earlier topic's passages: in a
conversation about elastic stop nuts, "What are the risks?", "And what is the capital of France?" and
"Who invented it?" were all answered by quoting the nut's sentences again. So a follow-up asked in
``own_words`` of its own must also find them in the evidence: a passage answers it when it is relevant
to the searched question as above and holds one of the user's own topic words, or when one of its
sentences holds the user's own words by the rule above, or, given an embedder, when one of the
relevant passages has a sentence within :data:`MIN_OWN_SIMILARITY` of what the user typed. Words that
name no topic (:data:`FILLER`, "use") neither carry nor block a follow-up, so one made of them alone
("How are they used?", "Why?") is judged by the borrowed topic as before, and "What dose should be
used?" is answered from the drug the conversation is about but not from a passage that says "use"
about nuts.

Measured on 44 follow-ups to six short passages (pump, ward, nut, drug, bread and tyre; 22 that the
passage answers and 22 it does not, all relevant to their rewritten question): before, all 44 passed.
The user's own topic words alone answered 11 of the 22 answerable ones (the others say it in other
words: "How much should I take?" for "the usual starting dose", "And which day is it?" for "on
Fridays") and refused all 22 others; with the embedder at 0.18, 21 of 22 pass (the closest sentence
of the refused "How worn can they get?" is at 0.14) and 18 of 22 are refused (let in at 0.19 to 0.31:
"Is it safe in pregnancy?" of metformin, "Who is the nurse in charge?" of a ward's service day).
Meaning cannot tell a paraphrase from a neighbouring subject: "What torque should be used for them?"
about the nuts was let in the same way (its closest sentence, on bolt threads after tightening, is at
0.40, while "And which day is it?" finds "serviced on Fridays" at 0.19), and the nut's sentences were
quoted as if they gave a torque. A question that asks for the value of a measure (:data:`MEASURES`:
"What torque ...", "At what pressure ...", follow-up or not) therefore needs a passage that names the
measure or states a quantity in its units ("opens at 3,000 psi" answers "What pressure does it open
at?"); without one it is refused, however close in meaning. A claim that names a measure asks for no
value and is judged as before: of SciFact's 450 claims, 12 name one, and the abstracts of 3 never do
("Arterioles have a larger lumen diameter than venules.", "the pressure of antimicrobial usage").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from citeline.answer.names import Reading, read_under, squashed, written_codes
from citeline.answer.quantities import quantities
from citeline.answer.rows import named_rows, row_keys
from citeline.answer.support import ANALYZER, PassageSentences, VectorCache, content_terms, sentence_spans
from citeline.retrieve.search import Hit

FILLER = frozenset(
    [
        "what",
        "how",
        "why",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "tell",
        "explain",
        "describe",
        "please",
        "give",
        "show",
        "list",
        "mean",
        "means",
        "meant",
        "need",
        "needs",
        "want",
        "wants",
        "like",
        "thing",
        "things",
        "also",
        "else",
        "more",
        "much",
        "many",
        "really",
        "ok",
        "okay",
        "thanks",
        "thank",
        "often",
        "usually",
        "always",
        "never",
        "ever",
        "still",
        "already",
        "exactly",
        "actually",
        "generally",
        "typically",
        "long",
        "way",
        "ways",
        "kind",
        "sort",
        "lot",
        "lots",
        "one",
        "ones",
        "example",
        "examples",
        "yes",
        "yeah",
        "possible",
        "can",
        "may",
        "might",
        "must",
        "shall",
        "get",
        "got",
        "another",
    ]
)
"""Words that carry no topic: question words, requests, hedges. A follow-up rewrite never borrows them
(:mod:`citeline.chat.rewrite`), and they are not the user's own topic words here."""

# Every manual says "use": a follow-up's "What dose should be used?" is about the dose.
_NO_TOPIC_TERMS = content_terms(" ".join([*FILLER, "use", "used", "uses", "using"]))

MIN_OWN_SIMILARITY = 0.18
"""A follow-up's own words (not the borrowed ones) said in other words: the cosine similarity, for the
packaged MiniLM embedder, between what the user typed and the closest sentence of a passage relevant to
the rewritten question (see the module docstring)."""

CLEAR_SIMILARITY = 1.4
"""A passage holding none of the question's topic words answers it only when it is at least this many
times ``min_similarity`` close to the question (0.35 at the default floor; see the module docstring)."""

MIN_TERM_SHARE = 0.5
"""A passage with a sentence holding at least this share of the question's content terms may answer it,
whatever its similarity, when the sentence holds :data:`MIN_SHARED_TERMS` of them or an identifier."""

MIN_SHARED_TERMS = 2
"""One everyday word in common is no evidence: "what is the capital of France?" shared "capital" with
a guide that says "capitalised", half of its two terms, and was answered from it. An identifier is
enough alone ("What does E42 mean?")."""

MEASURES: dict[str, str] = {
    "torque": "torque",
    "pressure": "pressure",
    "temperature": "temperature",
    "voltage": "voltage",
    "wattage": "power",
    "amperage": "current",
    "weight": "mass",
    "weigh": "mass",
    "diameter": "length",
    "thickness": "length",
}
"""Words naming a measure, with the dimension (:mod:`citeline.answer.quantities`) its values are stated
in. A question naming one asks for its value, which a passage states by naming the measure or by a
quantity in its units ("opens at 3,000 psi" for "what pressure"); a passage doing neither does not
answer it, however close in meaning (see the module docstring). Only words that always name the
measure: "size", "speed" or "length" also name other things ("chunk size", "search speed")."""

_ASKING_WORD = re.compile(
    r"\b(?:what|which|how\s+(?:much|many|high|low|hot|cold|heavy)|tell|give|list|show)\b", re.IGNORECASE
)
#: How far after the asking word the measure is named ("What torque", "What is the tightening torque",
#: "How much torque"): further on, the question asks something else of a thing the measure describes
#: ("What drugs lower blood pressure?" asks for drugs). "Which weight loss drugs ...?" is still read
#: as asking a weight.
_MEASURE_REACH = 3
_MEASURE_TERMS = {term: dimension for word, dimension in MEASURES.items() for term in content_terms(word)}

# A thank-you or an acknowledgement made of these words alone asks nothing: read as a follow-up,
# "Thanks!" was searched with the conversation's topic and answered with the last answer again; asked
# of the documents, it was answered from whatever passage says "thanks" (a paper's acknowledgements).
COURTESIES = frozenset(
    [
        "thanks",
        "thank",
        "you",
        "ok",
        "okay",
        "alright",
        "great",
        "good",
        "cool",
        "nice",
        "perfect",
        "awesome",
        "cheers",
        "understood",
        "got",
        "it",
        "very",
        "much",
        "a",
        "lot",
        "hi",
        "hello",
        "hey",
        "bye",
        "goodbye",
    ]
)
_COURTESY_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?", re.UNICODE)


def is_courtesy(text: str) -> bool:
    """Whether ``text`` is a thank-you, a greeting or an acknowledgement and nothing else ("Thanks!",
    "Got it", "Great, thanks a lot"): it asks nothing of the documents."""
    words = [re.sub(r"['\u2019](?:s|re|ll|d|ve)$", "", w.lower()) for w in _COURTESY_WORD.findall(text)]
    return bool(words) and "?" not in text and all(w in COURTESIES for w in words)


# A code or part number (letters and digits: E42, XR200, COVID-19) or an acronym (NICS, BM25).
_IDENTIFIER = re.compile(r"\b(?=[^\W_]*\d)(?=[^\W_]*[^\W\d_])[^\W_]+\b|\b[A-Z]{2,}\b")


def answerable(
    question: str,
    evidence: Sequence[Hit],
    *,
    min_similarity: float,
    own_words: str | None = None,
    cache: VectorCache | None = None,
) -> bool:
    """Whether ``evidence`` may answer ``question`` (see the module docstring); 0 always says yes
    when there is evidence. ``own_words``: what the user typed, when ``question`` is a follow-up
    searched with terms borrowed from earlier turns; ``cache`` embeds them to find a sentence that
    says them in other words (without it, only their words count)."""
    if not evidence:
        return False
    if min_similarity <= 0:
        return True
    said = own_words.strip() if own_words is not None else ""
    if is_courtesy(said or question):
        return False
    measures = _asked_measures(said or question)
    if measures and not any(_states(hit, measures) for hit in evidence):
        return False
    if _asks_for_a_missing_row(said or question, evidence) or _looks_up_an_unwritten_code(
        said or question, evidence
    ):
        return False
    own = _topic_terms(said) if said and said != question.strip() else frozenset()
    asked = _Terms.of(question)
    if not own:
        return any(_relevant(asked, hit, min_similarity) for hit in evidence)
    relevant = [hit for hit in evidence if _relevant(asked, hit, min_similarity)]
    typed = _Terms.of(said)
    if any(own & content_terms(hit.text) for hit in relevant) or any(typed.held_by(hit) for hit in evidence):
        return True
    if cache is None or not relevant:
        return False
    sentences = [t for hit in relevant for t in PassageSentences.of_hit(hit).sentences]
    vectors = cache.matrix([said, *sentences])
    return bool(sentences) and float((vectors[1:] @ vectors[0]).max()) >= MIN_OWN_SIMILARITY


def _looks_up_an_unwritten_code(question: str, evidence: Sequence[Hit]) -> bool:
    """Whether ``question`` looks a code up ("What does E11.65 mean?", a query of codes as search reads
    it) and no passage of ``evidence`` writes it, whatever its punctuation ("E1165" is "E11.65").

    Only a passage that writes the code can say what it is: searched within a scope that does not hold
    the code list, the question was answered "E11.65 is a standard for the identification of an AOA
    sensor system test" from a Federal Register page (support 0.73).
    """
    if not ANALYZER.only_codes(question):
        return False
    looked_up = written_codes(question)
    # Squashed into the text, not compared code by code: "E11.65" is not read as one code (a dot ends
    # one), and a code found inside a longer one errs towards answering.
    texts = [squashed(text) for hit in evidence for text in (hit.text, *read_under(hit))]
    return bool(looked_up) and not any(code in text for code in looked_up for text in texts)


def _asks_for_a_missing_row(question: str, evidence: Sequence[Hit]) -> bool:
    """Whether ``evidence`` is a table's rows (:mod:`citeline.answer.rows`), none of which the question
    names, and the question asks about something none of them holds.

    A reference table answers for its rows: asked the adult dose of tacrolimus, which no row lists, the
    dosing table's rows for other drugs share the question's other words ("adult dose"), and the model
    gave paracetamol's dose as tacrolimus's. A question naming a row, or asking only what the rows
    hold ("Which drug is given for hypertension?"), is answered from them as before.
    """
    keys = [row_keys(hit) for hit in evidence]
    if any(found is None for found in keys):
        return False
    asked = Reading.of((question,))
    if named_rows((k for found in keys if found for k in found), asked):
        return False
    held = frozenset().union(
        *(content_terms(t) for hit in evidence for t in (hit.embedded, *read_under(hit)))
    )
    return bool(_topic_terms(question) - held)


def _asked_measures(question: str) -> set[str]:
    """The dimensions of the measures whose value ``question`` asks for: named after a question word
    or request ("What torque ...", "At what pressure ...", "Tell me the weight"). A claim naming one
    ("Arterioles have a larger lumen diameter than venules.") asks for no value, and "pressure" may be
    a figure of speech there ("the pressure of antimicrobial usage")."""
    asking = _ASKING_WORD.search(question)
    if asking is None:
        return set()
    words = [w for w in re.findall(r"[\w-]+", question[asking.end() :]) if content_terms(w)]
    first = {t for word in words[:_MEASURE_REACH] for t in content_terms(word)}
    return {_MEASURE_TERMS[t] for t in first if t in _MEASURE_TERMS}


def _states(hit: Hit, dimensions: set[str]) -> bool:
    """Whether ``hit`` names one of the measures of ``dimensions`` or states a quantity of one (in its
    text, or in its context: the header row "Tightening torque (N·m)" over the rows it holds)."""
    text = hit.embedded
    named = {t for t in content_terms(text) if _MEASURE_TERMS.get(t) in dimensions}
    return bool(named) or any(q.dimension in dimensions for q in quantities(text))


def _topic_terms(text: str) -> frozenset[str]:
    return content_terms(text) - _NO_TOPIC_TERMS


def _relevant(asked: _Terms, hit: Hit, min_similarity: float) -> bool:
    if asked.held_by(hit):
        return True
    if hit.similarity < min_similarity:
        return False
    # Near the floor, meaning alone is no evidence: a passage that names nothing the question asks
    # about must be clearly close to it.
    clear = hit.similarity >= CLEAR_SIMILARITY * min_similarity
    return clear or not asked.topic or bool(asked.topic & content_terms(hit.embedded))


@dataclass(frozen=True)
class _Terms:
    """A question's content terms and identifiers, read once for every hit it is checked against."""

    terms: frozenset[str]
    identifiers: frozenset[str]
    topic: frozenset[str]
    """The terms that name a topic (not :data:`FILLER` or "use")."""

    @classmethod
    def of(cls, question: str) -> _Terms:
        identifiers = {t for word in _IDENTIFIER.findall(question) for t in content_terms(word)}
        terms = content_terms(question)
        return cls(terms, frozenset(identifiers), terms - _NO_TOPIC_TERMS)

    def held_by(self, hit: Hit) -> bool:
        """Whether a sentence of ``hit`` holds enough of the terms (see the module docstring)."""
        if not self.terms:
            return False

        def holds(sentence: str) -> bool:
            shared = self.terms & content_terms(sentence)
            enough = len(shared) >= MIN_SHARED_TERMS or bool(shared & self.identifiers)
            return enough and len(shared) >= MIN_TERM_SHARE * len(self.terms)

        # A table's later chunk holds rows whose column names are its context's.
        return any(holds(hit.text[s:e]) for s, e in sentence_spans(hit.text)) or bool(
            hit.context and holds(hit.embedded)
        )
