"""Verdicts and stances: how the passages bear on a claim, whichever model writes the answer.

A question that is a claim ("Is it true that X?", "Does X lower Y?", or a plain statement) gets a
**verdict**, stated first in the answer. Passages get a **stance** towards the claim:

- a :class:`StanceJudge` (by default the packaged NLI classifier of :mod:`citeline.answer.nli`, the
  same whichever provider writes the answer) judges the first :data:`JUDGED_PASSAGES` passages the
  model reads, best-ranked first, that are about the claim (their support score, as the citation
  check measures it, reaches :data:`~citeline.answer.support.SUPPORT_THRESHOLD`): ``supports`` or
  ``contradicts``. The judge only tells contradiction from the rest, so unasked it would find a passage
  on another subject "supporting" any claim; when the best passage is not about the claim, there is
  no verdict but ``not_enough_evidence``;
- the best-ranked passage of the next :data:`CORROBORATING_DOCUMENTS` other documents is judged too
  when it is about the claim (its support score, as the citation check measures it, reaches
  :data:`~citeline.answer.support.SUPPORT_THRESHOLD`), and counts (is cited with that stance) when it
  bears out the same verdict: a second study that agrees is worth citing, while one that disagrees
  is mostly about something else (see :data:`JUDGED_PASSAGES`) and stays ``neutral``;
- a passage the judge finds supporting does not count as supporting when it states a quantity of the
  claim otherwise (:func:`~citeline.answer.quantities.disagreement`: "10 bar" claimed, "16 bar"
  stated, and never 10 bar): the classifier does not compare numbers. It is ``neutral``, and when no
  passage bears out a verdict the opening says which numbers differ, citing it;
- passages not judged, or not counted, are ``neutral``;
- the verdict is a function of the stances alone (:func:`verdict_of`): ``supports`` needs a passage
  that supports, ``contradicts`` one that contradicts, ``mixed`` both, and anything else is
  ``not_enough_evidence``. The answer's opening sentence (:func:`verdict_sentence`) cites exactly the
  passages that bear the verdict out, and :class:`~citeline.answer.events.Complete` computes its
  verdict from its citations' stances, so a verdict without a citation to a passage that bears it
  out cannot be made.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args

from citeline.answer.prompt import Passage
from citeline.answer.quantities import Disagreement, disagreement
from citeline.answer.support import SUPPORT_THRESHOLD, PassageSentences, VectorCache, support

Stance = Literal["supports", "contradicts", "neutral"]
"""How a cited passage bears on the claim."""

Verdict = Literal["supports", "contradicts", "mixed", "not_enough_evidence"]
"""What the passages, together, say of the claim."""

STANCES: tuple[Stance, ...] = get_args(Stance)
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)

JUDGED_PASSAGES = 1
"""Passages judged per claim. On SciFact the gold abstract is mostly the best-ranked passage; a
second judged passage is mostly another study, whose stance turns a right verdict into ``mixed``."""

CORROBORATING_DOCUMENTS = 1
"""Other documents whose best-ranked read passage is judged, and cited when it agrees with the verdict.
On the development claims of the 150 labelled SciFact claims, the gold abstract was often the second
document ranked when the first was another study (see docs/answers.md)."""

CONTRADICTS_MARGIN = 4.72
"""The NLI margin at or above which a passage contradicts the claim (below it, supports), chosen on the
margins of what answers judge: the best-ranked retrieved passage about the claim, not the gold abstract
(``python -m bench.verdicts --retrieved``). Chunks' margins run higher than whole abstracts', so the
earlier 4.44, chosen on gold abstracts, called a quarter of supported claims contradicted. Choosing
the threshold this way, under 5-fold cross-validation over the 150 labelled SciFact claims, scored
0.73 to 0.77 accuracy on the held-out folds (10 shuffles) against 0.70 for 4.44; 4.72 is the best
macro-F1 on all 150 (see docs/answers.md)."""

_CLAIM_TEMPLATE = re.compile(
    r"^\s*is it (?:true|the case|correct) that\s+(.+?)\s*\??\s*$", re.IGNORECASE | re.DOTALL
)
_YES_NO = re.compile(
    r"^\s*(?:is|are|was|were|does|do|did|can|could|will|would|has|have|had|should|may|might|must)\b",
    re.IGNORECASE,
)
# A wh-word may follow a preposition ("At what pressure...", "For how long...") and the question mark
# may be missing: either way the question is open.
_OPEN_QUESTION = re.compile(
    r"^\s*(?:(?:at|in|on|for|from|to|with|by|of|under|after|before|during|since|until|about|into|"
    r"over|within|between|through)\s+)?(?:what|which|who|whom|whose|when|where|why|how)\b",
    re.IGNORECASE,
)
# A request ("Please list the side effects", "Explain how...") asks for something, it claims nothing.
_REQUEST = re.compile(
    r"^\s*(?:please|list|show|give|tell|explain|describe|summari[sz]e|compare|find|outline|define)(?=[\s,:])",
    re.IGNORECASE,
)
# A question told as a statement ("I am a nurse ...; I would like to know what the maximum dose is.")
# asks; it claims nothing, wherever in the text the asking comes.
_ASKING = re.compile(
    r"\b(?:I(?:'d| would| want| need)(?: like)? to (?:know|find out|ask)|I(?:'m| am)? wonder(?:ing)?\b|"
    r"(?:can|could|would) you (?:tell|show|explain|let)\b|(?:tell|show) me\b|let me know\b)",
    re.IGNORECASE,
)
# A yes/no question whose subject is a personal pronoun ("Can they be reused?") is about something an
# earlier turn named; put to the classifier as it stands, "they" is nothing it can read. An "it" that
# stands for what follows ("Is it safe to run the pump dry?", "Would it be wise to ...") names its
# subject; "Does it need to be replaced?" does not.
_POINTING_SUBJECT = re.compile(r"^\s*\w+\s+(?:they|he|she|it)\b", re.IGNORECASE)
_ANTICIPATORY_IT = re.compile(
    r"^\s*(?:(?:is|was)\s+it|(?:would|will|could|can|might|should)\s+it\s+be)\s+(?:[\w-]+\s+){1,2}"
    r"(?:to|that|whether|for)\b",
    re.IGNORECASE,
)
# Markup pasted into a question (an HTML tag, a script, a comment) is no part of what it claims: the
# attribute of '<img src=x onerror="window.pwned=9">' was read as a figure the claim states ("it states
# 9, where the source states 0.25"), and a tag before "Is ..." hid the yes/no question. A tag opens with
# an HTML element's name or carries an attribute, so "<10 bar" is a comparison and "<E42>" a code.
_HTML_ELEMENTS = (
    "a|abbr|audio|b|big|blockquote|body|br|button|center|code|div|details|em|embed|font|form|h[1-6]|head|"
    "hr|html|i|iframe|img|input|label|li|link|mark|math|meta|object|ol|option|p|pre|q|s|select|small|"
    "span|strike|strong|sub|summary|sup|svg|table|tbody|td|textarea|th|thead|title|tr|u|ul|video"
)
_MARKUP = re.compile(
    r"<(script|style)\b[^>]*>.*?(?:</\1\s*>|$)|<!--.*?(?:-->|$)"
    rf"|</?(?:{_HTML_ELEMENTS})(?:\s[^<>]*)?/?>|<[A-Za-z][\w:-]*\s[^<>]*=[^<>]*>",
    re.IGNORECASE | re.DOTALL,
)
# The same two readings in a claim put as a statement ("They can be reused.", "Is it true that it
# lowers blood glucose?") and an "it" standing for what follows ("It is unsafe to reuse the nut.").
_POINTING_STATEMENT = re.compile(r"^\s*(?:they|he|she|it)\b", re.IGNORECASE)
_ANTICIPATORY_STATEMENT = re.compile(
    r"^\s*(?:it\s+(?:is|was|(?:would|will|could|can|might|should)\s+be)\s+|it['\u2019]s\s+|it\s+takes\s+)"
    r"(?:[\w-]+\s+){1,4}(?:to|that|whether|for)\b",
    re.IGNORECASE,
)
# "Should I use scopes or namespaces ...?" asks which, not whether: it was answered "Yes: the sources
# say so". So does a question whose subject is the choice ("Is pgvector or Chroma faster ...?"). An
# "or" further on is part of what is claimed ("Does aspirin reduce the risk of heart attack or
# stroke?" is a claim to judge), and "... or not?" still asks whether.
_ALTERNATIVES = re.compile(r"^\s*\w+\s+(?:(?:I|we|you)\b.*?\s|(?:\S+\s+){1,3}?)or\s+(?!not\b)", re.IGNORECASE)
_LEADING_CONJUNCTION = re.compile(r"^(?:and|but|so|then|also|okay|ok|well)(?:[\s,]+|$)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.[\"'\u201d\u2019)]*$")
MIN_STATEMENT_WORDS = 4
"""A statement without a closing full stop shorter than this is a keyword search ("elastic stop nut",
"XR200 max pressure") or an exclamation ("Thanks!", "Got it!"), not a claim; "Aspirin lowers
cholesterol." with its full stop is one."""


def claim_of(question: str) -> str | None:
    """The claim a question puts to the evidence, or None when it asks something else.

    ``Is it true that X?`` puts ``X``; another yes/no question (``Does X lower Y?``) and a plain
    statement (``X lowers Y.``) put themselves. Open questions (``How do I prime the pump?``), questions
    told as statements (``... I would like to know how long to wait between doses.``), keyword searches
    (``elastic stop nut``: fewer than :data:`MIN_STATEMENT_WORDS` words and no full stop) and yes/no
    questions and claims whose subject is a pronoun pointing to an earlier turn (``Can they be
    reused?``, ``Is it true that they can be reused?``: they name nothing to check) and yes/no
    questions offering alternatives (``Should I use scopes or namespaces?``: they ask which) put none.
    """
    # (The terms a conversation's search borrows from earlier turns never get here: it judges the user's
    # own words, answer_stream's claim_text, so a claim's own closing "(in mice)" is kept.)
    text = _asked(question)
    if not text:
        return None
    template = _CLAIM_TEMPLATE.match(text)
    if template:
        return _named(template.group(1).strip())
    if _OPEN_QUESTION.match(text) or _REQUEST.match(text) or _ASKING.search(text):
        return None
    if _YES_NO.match(text):
        if _ALTERNATIVES.search(text):
            return None
        return None if _POINTING_SUBJECT.match(text) and not _ANTICIPATORY_IT.match(text) else text
    if text.endswith("?") or (len(text.split()) < MIN_STATEMENT_WORDS and not _SENTENCE_END.search(text)):
        return None
    return _named(text)


# A yes/no question put to the classifier as a statement (statement_of): "do" carries nothing the
# statement needs; a pronoun subject ("Can I ...", "Is it safe to ...") or a participle ("Is a
# superseded version searched?") shows where the subject ends, for the verb to go back in.
# "... or not?" asks the same: the statement leaves it out.
_AUXILIARY = re.compile(r"^\s*(\w+)\s+(.+?)(?:,?\s+or\s+not)?[\s?]*$", re.DOTALL | re.IGNORECASE)
_DO = frozenset({"do", "does", "did"})
_SUBJECT_PRONOUNS = frozenset({"i", "you", "we", "they", "he", "she", "it", "there", "one"})
_DETERMINERS = frozenset(
    {
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "my",
        "your",
        "our",
        "its",
        "their",
        "every",
        "each",
        "any",
        "some",
        "no",
        "all",
    }
)
_VERB_AFTER_SUBJECT = re.compile(
    r"^(?:be|been|being|[a-z]{3,}ed|done|given|known|made|kept|sent|seen|taken)$"
)


def statement_of(claim: str) -> str:
    """``claim`` as the classifier reads a claim: a statement. A yes/no question becomes the statement
    it asks about ("Does citeline send anything over the network?": "Citeline send anything over the
    network."; "Is a superseded version searched?": "A superseded version is searched."); a statement
    comes back as it is.

    The classifier was trained and calibrated on statements. Put a question, it cannot be contradicted
    by what a passage says: its margin stays near :data:`CONTRADICTS_MARGIN` whatever the passage
    says, so a passage answering no ("The packaged models ... never fetch anything") gave "Yes", and
    one answering yes ("`chroma` keeps them in Chroma") gave "No".
    """
    text = _asked(claim)
    found = _AUXILIARY.match(text) if _YES_NO.match(text) else None
    if found is None:
        return claim
    auxiliary, words = found.group(1).lower(), found.group(2).split()
    if auxiliary not in _DO:
        if words[0].lower() in _SUBJECT_PRONOUNS:
            words.insert(1, auxiliary)
        else:
            # Without a verb found, the auxiliary is left out: "The default chunk size 800 characters."
            # still reads as the statement, where the question did not.
            at = next(
                (
                    i
                    for i in range(1, len(words))
                    if _VERB_AFTER_SUBJECT.match(words[i].lower())
                    and words[i - 1].lower() not in _DETERMINERS
                ),
                None,
            )
            if at is not None:
                words.insert(at, auxiliary)
    sentence = " ".join(words)
    return f"{sentence[:1].upper()}{sentence[1:]}."


def _named(claim: str) -> str | None:
    """``claim``, unless its subject is a pronoun pointing to an earlier turn."""
    pointing = _POINTING_STATEMENT.match(claim) and not _ANTICIPATORY_STATEMENT.match(claim)
    return None if pointing else claim


@dataclass(frozen=True)
class Judgement:
    """A judge's stance on one passage, and the score it was decided on (higher: more contradicting)."""

    stance: Stance
    margin: float


class StanceJudge(Protocol):
    """Judges how one passage bears on a claim; ``cache`` embeds sentences, if the judge needs to."""

    model_id: str

    def judge(self, claim: str, passage: Passage, cache: VectorCache) -> Judgement: ...


def stance_of_margin(margin: float) -> Stance:
    """The stance an NLI margin gives (see :data:`CONTRADICTS_MARGIN`)."""
    return "contradicts" if margin >= CONTRADICTS_MARGIN else "supports"


def verdict_of(stances: Iterable[Stance]) -> Verdict:
    """The verdict the stances of the cited passages bear out (see the module docstring)."""
    found = set(stances)
    if {"supports", "contradicts"} <= found:
        return "mixed"
    if "supports" in found:
        return "supports"
    if "contradicts" in found:
        return "contradicts"
    return "not_enough_evidence"


_BEARING: Mapping[Verdict, frozenset[Stance]] = {
    "supports": frozenset({"supports"}),
    "contradicts": frozenset({"contradicts"}),
    "mixed": frozenset({"supports", "contradicts"}),
    "not_enough_evidence": frozenset(),
}


@dataclass(frozen=True)
class Assessment:
    """A claim and the stance of each judged passage (by chunk id), with the judge's margins, and the
    passages the judge found supporting that state one of the claim's quantities otherwise."""

    claim: str
    stances: Mapping[int, Stance] = field(default_factory=dict)
    margins: Mapping[int, float] = field(default_factory=dict)
    disagreements: Mapping[int, Disagreement] = field(default_factory=dict)

    def stance(self, chunk_id: int) -> Stance:
        """The stance of a passage: neutral when it was not judged."""
        return self.stances.get(chunk_id, "neutral")

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.stances.values())

    def bearing(self, passages: Sequence[Passage]) -> list[Passage]:
        """The passages, in order, whose stance bears out the verdict (both sides when it is mixed)."""
        wanted = _BEARING[self.verdict]
        return [p for p in passages if self.stance(p.chunk_id) in wanted]

    def differing(self, passages: Sequence[Passage]) -> list[Passage]:
        """The passages, in order, whose numbers the opening reports: those stating a claimed quantity
        otherwise, when no passage bears out a verdict (a verdict cites what bears it out)."""
        if self.verdict != "not_enough_evidence":
            return []
        return [p for p in passages if p.chunk_id in self.disagreements]


def assess(
    claim: str,
    passages: Sequence[Passage],
    judge: StanceJudge,
    cache: VectorCache,
    *,
    limit: int = JUDGED_PASSAGES,
    corroborating: int = CORROBORATING_DOCUMENTS,
    compare_quantities: bool = True,
) -> Assessment:
    """Judge the first ``limit`` passages the model reads (``shown`` is not empty) against ``claim``,
    then the best-ranked read passage of each of the next ``corroborating`` other documents, which
    counts only when it is about the claim and its stance bears out the verdict of the first ones.

    ``compare_quantities`` False leaves out the check of the claim's quantities (to measure what it
    changes: ``python -m bench.verdicts_quantities``). Raises :class:`~citeline.errors.CitelineError`
    when the judge fails.
    """
    read = [p for p in passages if p.shown != ()]
    # The judge tells contradiction from the rest, so a passage on another subject "supports" any claim:
    # a passage is judged only when it is about the claim, by the citation check's measure.
    about = [p for p in read[:limit] if _about(claim, p, cache)]
    # The classifier reads statements: a yes/no question is judged as the statement it asks about.
    hypothesis = statement_of(claim)
    judged = {p.chunk_id: judge.judge(hypothesis, p, cache) for p in about}

    def differs(p: Passage, stance: Stance) -> Disagreement | None:
        # The classifier does not compare numbers: a "supports" stating the claim's quantity otherwise
        # does not count. A "contradicts" stands whatever the numbers say.
        return disagreement(claim, p.text) if compare_quantities and stance == "supports" else None

    if _YES_NO.match(claim):
        # Asked yes or no, a passage that answers with a condition answers neither; a verdict would
        # misstate it either way ("Nothing, unless you configure it: ..." was judged a "Yes").
        for p in about:
            if _conditional(claim, p, cache):
                judged[p.chunk_id] = Judgement("neutral", judged[p.chunk_id].margin)

    differ: dict[int, Disagreement] = {}
    for p in about:
        if (found := differs(p, judged[p.chunk_id].stance)) is not None:
            differ[p.chunk_id] = found
    counted = [j.stance for chunk_id, j in judged.items() if chunk_id not in differ]
    wanted = _BEARING[verdict_of(counted)]
    if wanted and corroborating:
        # Each other document's best-ranked read passage, in rank order.
        documents = {p.hit.document_id for p in read[:limit]}
        others: list[Passage] = []
        for p in read[limit:]:
            if len(others) == corroborating:
                break
            if p.hit.document_id not in documents:
                documents.add(p.hit.document_id)
                others.append(p)
        for p in others:
            if not _about(claim, p, cache):
                continue
            judgement = judge.judge(hypothesis, p, cache)
            if judgement.stance in wanted and differs(p, judgement.stance) is None:
                judged[p.chunk_id] = judgement
    return Assessment(
        claim=claim,
        stances={chunk_id: j.stance for chunk_id, j in judged.items() if chunk_id not in differ},
        margins={chunk_id: j.margin for chunk_id, j in judged.items()},
        disagreements=differ,
    )


# A sentence that answers "it depends": the answer holds only under a condition it names.
_CONDITION = re.compile(
    r"\b(?:unless|except(?:\s+when|\s+if)?|only\s+(?:if|when|where|after|once|while|with)|provided\s+that|"
    r"as\s+long\s+as)\b",
    re.IGNORECASE,
)


def _conditional(claim: str, passage: Passage, cache: VectorCache) -> bool:
    """Whether the sentence of ``passage`` that best matches ``claim`` answers it under a condition."""
    sentences = PassageSentences.of_hit(passage.hit)
    if not sentences.sentences:
        return False
    best = sentences.sentences[support(claim, sentences, cache).best_sentence]
    return _CONDITION.search(best) is not None


def _about(claim: str, passage: Passage, cache: VectorCache) -> bool:
    """Whether ``passage`` is about ``claim``: its best sentence reaches the citation check's threshold."""
    sentences = PassageSentences.of_hit(passage.hit)
    return support(claim, sentences, cache).score >= SUPPORT_THRESHOLD


def _asked(question: str) -> str:
    """What ``question`` asks, without markup and without the "And" or "So" a follow-up often opens
    with, neither of which changes it."""
    text = question
    if _MARKUP.search(text):
        # The spaces the markup leaves, and any before the question mark it stood in front of.
        text = re.sub(r"\s+([?.!,;:])", r"\1", " ".join(_MARKUP.sub(" ", text).split()))
    return _LEADING_CONJUNCTION.sub("", text.strip(), count=1).strip()


def asks_yes_no(question: str) -> bool:
    """Whether ``question`` asks yes or no of the claim it puts (``Can they be reused?``, ``Does X lower
    Y?``), rather than putting a claim to be checked (``Is it true that X?``, ``X lowers Y.``)."""
    text = _asked(question)
    return bool(text) and not _CLAIM_TEMPLATE.match(text) and _YES_NO.match(text) is not None


#: The verdict sentences, for a claim put ("Is it true that X?", "X lowers Y.") and for a question asked
#: yes or no: supports, contradicts, mixed, and neither (followed by what the sources state otherwise).
_VERDICT_WORDS: Mapping[bool, tuple[str, str, str, str]] = {
    False: (
        "Yes: the sources support this claim {supports}.",
        "No: the sources contradict this claim {contradicts}.",
        "The sources disagree: some support this claim {supports}, others contradict it {contradicts}.",
        "The sources neither clearly support nor contradict this claim",
    ),
    True: (
        "Yes: the sources say so {supports}.",
        "No: the sources say otherwise {contradicts}.",
        "The sources disagree: some say yes {supports}, others no {contradicts}.",
        "The sources do not clearly say yes or no",
    ),
}


def verdict_sentence(
    verdict: Verdict,
    numbers: Mapping[Stance, Sequence[int]],
    differing: Sequence[tuple[int, Disagreement]] = (),
    *,
    asked: bool = False,
) -> str:
    """The answer's first sentence: the verdict in plain words, citing the passages that bear it out.

    ``numbers`` gives the conversation numbers of the passages of each stance; ``differing``, the
    number and the disagreement of each passage whose numbers differ from the claim's, which a
    verdict of ``not_enough_evidence`` names. ``asked``: the question asked yes or no
    (:func:`asks_yes_no`), and the sentence answers it ("Yes: the sources say so [1]."): "the sources
    support this claim" answered "Can elastic stop nuts be reused?" as if the reader had made a claim.
    """
    supports, contradicts, mixed, neither = _VERDICT_WORDS[asked]
    cited = {s: f"[{', '.join(map(str, numbers.get(s, ())))}]" for s in ("supports", "contradicts")}
    if verdict == "supports":
        return supports.format(**cited)
    if verdict == "contradicts":
        return contradicts.format(**cited)
    if verdict == "mixed":
        return mixed.format(**cited)
    if differing:
        said = "; ".join(f"{d.describe()} [{number}]" for number, d in differing)
        return f"{neither}: {said}."
    return f"{neither}."
