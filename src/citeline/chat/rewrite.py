"""Follow-up questions rewritten into standalone search queries.

"How often should it be serviced?" means nothing to a search index; after "How do I prime the
centrifugal pump?" it means "how often should the centrifugal pump be serviced". This module makes
that query, so retrieval for turn 2 and later finds the topic the user is still talking about.

**Which questions are follow-ups** (:func:`is_follow_up`). Any one of these makes a question lean on
the conversation:

1. it opens with a continuation: "and", "also", "but", "or", "so", "then", "what about", "how about",
   "what else", "what if", "same", "more", "tell me more";
2. it holds a personal pronoun that points back: it, its, they, them, their, he, she, him, her, his...
   A pronoun whose referent the question names before it points back to nothing (:func:`_referred`):
   "List every step of the install and the variables it needs" is about the install, and "What is an
   elastic stop nut and can it be reused?" about the nut, while "What torque does it need?" and "What
   is the torque it needs?" still lean on the conversation. A noun without an article (a name such as
   "citeline", a mass noun, a plural) counts where its place shows it is a noun phrase
   (:func:`_bare_noun`): "How does citeline store its data?", "What is pgvector and how does it
   work?" and "Explain how citeline stores its data" name their own subject, while "How do I
   configure its timeout?" and "What do users see on its page?" do not;
3. it holds a demonstrative (this, that, these, those) that is not directly after a content word, so
   "is that safe?" and "what does this mean?" count, but "the pump that primes itself" does not;
4. it is too short to stand alone: at most one content word (a word that is neither a stop word nor a
   question or filler word), or two when one of them follows "the", unless a word names something
   specific (an acronym, a word with digits, or a capitalised word that does not open the question):
   "what is the cost?", "what was the root cause?" and "where is the drain valve?" are follow-ups
   (the definite article points at a thing the conversation gave), "what is BM25?", "what is a drain
   valve?" and "is paracetamol the same as acetaminophen?" are not. (Measured by
   ``bench.follow_up_detection``: two words with "the" caught 8 more of the 240 questions of ``test``
   and ``heldout`` than one word alone, and left 1 standalone question fewer alone; two words without
   the article would also take bare names, "what is pgvector and how does it work?", as follow-ups);
5. it names no topic of its own: every content word is an aspect that any topic has (:data:`ASPECTS`:
   dose, use, side effects, safety, cost, duration, who it is for, a state such as wrong or
   missing...) and none is specific, so "what
   dose should be used?" and "is the usual dose safe for adults?" are follow-ups, while "what dose of
   metformin should be used?" is not;
6. it holds a phrase that leaves its referent to the conversation (:func:`_leans_by_phrase`): "which
   one", "the latter"; a comparison without its other term ("the same", "instead", "what else", "is
   the newer version different?"); the conversation's document named by its kind alone ("what does
   the manual say about leak test limits?", unless the question names something specific); or a
   fragment that opens with a preposition or "any" and asks nothing itself ("for a 15 kg child?").

Chat is typed fast: "whats" is read as "what's", and a demonstrative that introduces what follows it
("what does this error mean: connection pool exhausted") or a pronoun after quoted words ("getting
'port 8080 already in use' when running it": the quote is no referent) are read as such.
``python -m bench.follow_up_detection`` measures these rules on 360 chat questions written blind to them.

A thank-you or an acknowledgement without a question mark ("Thanks!", "Got it",
:func:`citeline.answer.relevance.is_courtesy`)
is no follow-up. A question that is none of these passes unchanged; the detector errs towards
follow-ups, since adding the previous topic to a self-contained question costs less than searching
for "it".

**How they are rewritten.** With an LLM configured, the model rewrites the question from the last
turns (:data:`REWRITE_PROMPT`). Its query is used only if it passes :func:`accept_rewrite`: it keeps
every content word of the question and brings in at least one word of the conversation that the
question lacks. Small models often repeat the question, copy an earlier question or the previous
answer, or drop the topic; each of those fails the check. Without a model, or when it fails, says
nothing, says too much or fails the check, :func:`heuristic_rewrite` appends the key terms of the
previous standalone query (its content words not already in the question, in their original form) in
parentheses: "How often should it be serviced? (prime centrifugal pump)". Since that previous query
was itself rewritten, the topic carries across several follow-ups. A turn that got the no-evidence
answer lends nothing, to the heuristic or the model: its topic is not what the conversation is about.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Literal

from citeline.answer.llm import LLM, GenerationOptions, Message, complete
from citeline.answer.relevance import FILLER, is_courtesy
from citeline.chat.store import Turn
from citeline.errors import GenerationError
from citeline.store.analyzer import ENGLISH_STOP_WORDS, Analyzer

_WORD = re.compile(r"[^\W_]+(?:[-'\u2019/.][^\W_]+)*", re.UNICODE)
# "it's", "that's", "they're": the pronoun is what matters.
_CONTRACTION = re.compile(r"['\u2019](s|re|ll|d|ve)$")
# The same contractions typed without their apostrophe, as chat is: "whats the dose" asks what "what's
# the dose" asks, and "whats" is no topic word.
_BARE_CONTRACTIONS = {
    "whats": "what",
    "hows": "how",
    "wheres": "where",
    "whos": "who",
    "whens": "when",
    "whys": "why",
    "thats": "that",
    "theyre": "they",
    "dont": "do",
    "doesnt": "does",
    "didnt": "did",
    "isnt": "is",
    "arent": "are",
    "wasnt": "was",
    "cant": "can",
    "wont": "will",
    "shouldnt": "should",
    "im": "i",
    "ive": "i",
    "youre": "you",
}
_CITATION_MARK = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_QUOTES = "\"'`\u201c\u201d"
_CLAIM_FORM = re.compile(
    r"^\s*(?:(?:and|so|but)\s+)?is\s+it\s+(?:true|the\s+case|correct)\s+that\b", re.IGNORECASE
)

CONTINUATIONS = (
    "what about",
    "how about",
    "what else",
    "what if",
    "tell me more",
    "and",
    "also",
    "but",
    "or",
    "so",
    "then",
    "same",
    "more",
)
ANAPHORS = frozenset(
    [
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "her",
        "hers",
        "herself",
    ]
)
DEMONSTRATIVES = frozenset({"this", "that", "these", "those"})
# Words that ask about an aspect of a topic without naming one: a question made only of these (and
# stop or filler words) means nothing until the conversation says what it is about. Written forms,
# not stems, so that a topic word sharing a stem ("user manual") stays a topic.
ASPECTS = frozenset(
    [
        # amount and use
        "dose",
        "doses",
        "dosage",
        "dosages",
        "dosing",
        "amount",
        "quantity",
        "use",
        "used",
        "using",
        "take",
        "takes",
        "taken",
        "taking",
        "given",
        "apply",
        "applied",
        "recommended",
        "recommend",
        "recommendation",
        "recommendations",
        "usual",
        "normal",
        "typical",
        "standard",
        "maximum",
        "minimum",
        "max",
        "min",
        "daily",
        "reduce",
        "reduced",
        "increase",
        "increased",
        "adjust",
        "adjusted",
        "stop",
        "stopped",
        "start",
        "started",
        "starting",
        "initial",
        "avoid",
        "avoided",
        # effects, safety, risk
        "side",
        "effect",
        "effects",
        "adverse",
        "reaction",
        "reactions",
        "safe",
        "safety",
        "safely",
        "dangerous",
        "risk",
        "risks",
        "harmful",
        "benefit",
        "benefits",
        "work",
        "works",
        "working",
        "effective",
        "interaction",
        "interactions",
        "interact",
        "contraindication",
        "contraindications",
        "warning",
        "warnings",
        "problem",
        "problems",
        "alternative",
        "alternatives",
        "difference",
        "differences",
        # time
        "time",
        "duration",
        "last",
        "lasts",
        "frequency",
        "frequently",
        # state: "What is wrong and how do I fix it?" names nothing "it" could stand for
        "wrong",
        "broken",
        "missing",
        "new",
        "different",
        "available",
        # cost
        "cost",
        "costs",
        "price",
        "expensive",
        "cheap",
        # who
        "children",
        "child",
        "kids",
        "adults",
        "adult",
        "elderly",
        "patients",
        "patient",
        "people",
        "pregnant",
        "pregnancy",
    ]
)
SHORT_CONTENT_WORDS = 1
MAX_KEY_TERMS = 8
HISTORY_TURNS = 3
ANSWER_CHARS = 400

REWRITE_PROMPT = (
    "You rewrite the user's last question from a conversation into one standalone search query. "
    "Resolve every pronoun and ellipsis from the conversation, keep every name, number and technical "
    "term, and add nothing else. Reply with the query alone, on one line, without quotes or explanation."
)


@dataclass(frozen=True)
class Rewrite:
    """The query to search for a question, and how it was made.

    ``method``: ``unchanged`` (first turn, or a self-contained question), ``heuristic`` or ``llm``.
    ``fell_back`` is true when an LLM was configured but its rewrite failed or was unusable.
    """

    query: str
    method: Literal["unchanged", "heuristic", "llm"]
    fell_back: bool = False


def rewrite(
    question: str,
    history: Sequence[Turn],
    *,
    llm: LLM | None,
    options: GenerationOptions | None = None,
) -> Rewrite:
    """The standalone query for ``question``, asked after ``history`` (oldest turn first).

    Only the turns that were answered lend it a topic; with none, it is searched as asked.
    """
    question = question.strip()
    # A turn the documents could not answer set no topic: "Can they be reused?" after "What is an
    # elastic stop nut?" and a refused "What is the capital of France?" is about the nuts.
    history = [turn for turn in history if turn.answered]
    if not history or not is_follow_up(question):
        return Rewrite(question, "unchanged")
    if llm is not None:
        query = llm_rewrite(question, history, llm, options or GenerationOptions())
        if query is not None:
            return Rewrite(query, "llm")
    query = heuristic_rewrite(question, [turn.standalone_query for turn in history])
    return Rewrite(query, "unchanged" if query == question else "heuristic", fell_back=llm is not None)


def asked_of_model(question: str, rewritten: Rewrite) -> str:
    """What the answering model is asked for ``question``, searched as ``rewritten``: a question.

    A heuristic rewrite is a search query, the question with the previous topic's key terms in
    parentheses ("How often should it be serviced? (prime centrifugal pump)"); the model is asked the
    question as the user put it, and reads the passages those terms found. A model's rewrite is asked
    as it is, with any parentheses the user did not write opened ("What is the size (of the M10
    bolts)?": "What is the size of the M10 bolts?").
    """
    if rewritten.method == "heuristic":
        return question.strip()
    if rewritten.method == "unchanged":
        return rewritten.query

    def opened(found: re.Match[str]) -> str:
        return found.group(0) if found.group(0) in question else f" {found.group(1)}"

    return " ".join(re.sub(r"\s*\(([^()]*)\)", opened, rewritten.query).split()).replace(" ?", "?")


def is_follow_up(question: str) -> bool:
    """Whether ``question`` leans on earlier turns (the rules are in this module's docstring)."""
    found = list(_WORD.finditer(question))
    words = [match.group(0) for match in found]
    lowered = [_normal(w) for w in words]
    if is_courtesy(question):
        return False
    opening = " ".join(lowered[:3])
    if any(opening == c or opening.startswith(c + " ") for c in CONTINUATIONS):
        return True
    if any(w in ANAPHORS and not _referred(question, w, i) for i, w in enumerate(lowered)):
        return True
    for i, word in enumerate(lowered):
        # "What does this error mean: pool exhausted" shows what "this" is after it.
        if (
            word in DEMONSTRATIVES
            and (i == 0 or not _is_content(lowered[i - 1]))
            and not _OPENS_QUOTE_OR_COLON.search(question, found[i].end())
        ):
            return True
    content = [(i, words[i]) for i, w in enumerate(lowered) if _is_content(w)]
    named = any(_is_specific(w, i) for i, w in content)
    if _leans_by_phrase(lowered, named=named):
        return True
    if named:
        return False
    definite = any(i > 0 and lowered[i - 1] == "the" for i, _ in content)
    short = len(content) <= SHORT_CONTENT_WORDS or (len(content) == SHORT_CONTENT_WORDS + 1 and definite)
    return short or all(lowered[i] in ASPECTS for i, _ in content)


# Words that open a noun phrase: what follows them names a thing a pronoun can stand for.
_DETERMINERS = frozenset(
    {"the", "a", "an", "every", "each", "my", "your", "our", "this", "that", "these", "those", "its", "their"}
)
# A pronoun in a later clause than its noun ("... the install and the variables it needs", "... the
# pump before it runs"); within one clause, "What is the torque it needs?" or "Does the warranty cover
# it?", the noun is not what it stands for.
_CLAUSE_BREAKS = frozenset(
    {
        ",",
        ";",
        ":",
        "and",
        "or",
        "but",
        "before",
        "after",
        "when",
        "while",
        "if",
        "until",
        "once",
        "because",
        "so",
    }
)
# A possessive or reflexive stands for a noun of its own clause: "How does the pump protect its seal?".
_BOUND_IN_CLAUSE = frozenset(
    {"its", "itself", "their", "theirs", "themselves", "his", "himself", "hers", "herself"}
)
# The documents themselves, which a follow-up asks about its topic: "What does the manual say about it?".
_SOURCE_WORDS = frozenset(
    {
        "manual",
        "manuals",
        "guide",
        "guides",
        "documentation",
        "docs",
        "source",
        "sources",
        "passage",
        "passages",
        "answer",
        "answers",
    }
)
_TOKEN = re.compile(rf"{_WORD.pattern}|[,;:]", re.UNICODE)


def _referred(question: str, pronoun: str, position: int) -> bool:
    """Whether the pronoun ``pronoun``, the ``position``-th word of ``question``, stands for a noun the
    question names before it: a word of a noun phrase that opens with a determiner (or a specific word:
    an acronym, a code, a name), that names a topic (no aspect such as "dose", not the documents
    themselves), in an earlier clause unless the pronoun is possessive or reflexive."""
    found = list(_TOKEN.finditer(question))
    tokens = [_normal(match.group(0)) for match in found]
    originals = [match.group(0) for match in found]
    # Words quoted (an error message, a title) are what the question quotes, not what "it" stands for:
    # "getting 'port 8080 already in use' when running it" runs something the conversation named.
    spans = _quoted_spans(question)
    quoted = [any(a <= m.start() < b for a, b in spans) for m in found]
    # The pronoun's place among the tokens (punctuation counted): the position-th word.
    words_seen, at = -1, len(tokens)
    for i, token in enumerate(tokens):
        if token not in {",", ";", ":"}:
            words_seen += 1
            if words_seen == position:
                at = i
                break
    bound = pronoun in _BOUND_IN_CLAUSE
    broken = False
    for i in range(at - 1, -1, -1):
        token = tokens[i]
        if token in _CLAUSE_BREAKS:
            broken = True
            continue
        if not (bound or broken) or quoted[i]:
            continue
        # Walking back, a noun phrase is the run of content words its determiner opens.
        opened = any(tokens[j] in _DETERMINERS for j in range(max(0, i - 3), i) if _phrase_run(tokens, j, i))
        if (
            (opened or _is_specific(originals[i], i) or _bare_noun(tokens, i, pronoun))
            and _is_content(token)
            and token not in ASPECTS
            and token not in _SOURCE_WORDS
            and token not in ANAPHORS
        ):
            return True
    return False


# Words after which a noun phrase stands even without an article: the subject of a question ("does
# citeline", "is pgvector"), a preposition's object ("about caching").
_AUXILIARIES = frozenset(
    {"is", "are", "was", "were", "does", "do", "did", "has", "have", "had"}
    | {"can", "could", "will", "would", "should", "shall", "may", "might", "must"}
)
_PLURAL_AUXILIARIES = frozenset({"are", "were", "do", "have"})
# Auxiliaries that say nothing of their subject's number (a modal, "did", "had"): the noun's own ending
# tells, a regular plural ("Can users change its settings?") being no referent of "its".
_NUMBERLESS_AUXILIARIES = _AUXILIARIES - _PLURAL_AUXILIARIES - {"is", "was", "does", "has"}
_PREPOSITIONS = frozenset(
    {"about", "across", "between", "by", "for", "from", "in", "into", "of", "on", "over", "under", "with"}
)
# An embedded question's subject follows these: "Explain how citeline stores its data".
_EMBEDDING = frozenset({"how", "why", "where", "when", "whether", "what", "which"})
# An imperative that opens the question takes the noun phrase after it: "Explain pgvector and ...".
_IMPERATIVES = frozenset({"explain", "describe", "define", "compare", "summarise", "summarize"})
_SINGULAR = frozenset({"it", "its", "itself", "he", "him", "his", "himself", "she", "her", "hers", "herself"})


_QUOTED = re.compile(r"""(?:^|(?<=[\s:(]))(["'`\u201c\u2018])(.+?)["'`\u201d\u2019](?=$|[\s.,;:!?)])""")


def _quoted_spans(question: str) -> list[tuple[int, int]]:
    """Where ``question`` quotes something: the character spans inside its quotation marks."""
    return [(found.start(2), found.end(2)) for found in _QUOTED.finditer(question)]


def _bare_noun(tokens: Sequence[str], i: int, pronoun: str) -> bool:
    """Whether ``tokens[i]`` stands where a noun phrase without an article stands: a name ("citeline"),
    a mass noun ("data") or a plural ("scopes"), which the determiner test cannot see.

    Without a tagger, the place tells: directly after an auxiliary ("How does citeline store its
    data?"), a preposition ("What is known about caching and ...") or an opening imperative ("Explain
    pgvector and ..."), or as the subject of an embedded question, with its verb after it ("Explain how
    citeline stores its data"). A participle ("What is needed and where is it kept?") is no noun, and a
    subject the auxiliary makes plural ("What do users see on its page?") is no referent of "its".
    """
    if i == 0:
        return False
    word, before = tokens[i], tokens[i - 1]
    if len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        return False
    if before in _AUXILIARIES:
        plural = before in _PLURAL_AUXILIARIES or (before in _NUMBERLESS_AUXILIARIES and _looks_plural(word))
        return not (plural and pronoun in _SINGULAR)
    if before in _PREPOSITIONS:
        return True
    if before in _IMPERATIVES:
        return i == 1
    # "how big is it" is no embedded question: the word after "how" must be followed by its verb. A
    # singular pronoun needs a verb that agrees ("citeline stores") or says nothing of number ("stored").
    if before in _EMBEDDING and i >= 2 and i + 1 < len(tokens) and _is_content(tokens[i + 1]):
        verb = tokens[i + 1]
        return pronoun not in _SINGULAR or verb.endswith(("s", "ed"))
    return False


def _looks_plural(word: str) -> bool:
    """Whether ``word`` has a regular plural's ending ("users", "scopes"; not "class", "status",
    "analysis"). A name ending so ("kubernetes") reads as a plural too: the question then borrows the
    conversation's topic, which costs less than losing it from a question that needed it."""
    return len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is"))


def _phrase_run(tokens: Sequence[str], start: int, end: int) -> bool:
    """Whether ``tokens[start + 1 : end + 1]`` are all words of one noun phrase (no break, no pronoun)."""
    return all(
        t not in _CLAUSE_BREAKS and t not in ANAPHORS and t not in _DETERMINERS
        for t in tokens[start + 1 : end + 1]
    )


def heuristic_rewrite(question: str, previous_queries: Sequence[str]) -> str:
    """``question`` with the key terms of the latest previous query that has any, in parentheses.

    ``previous_queries`` are the standalone queries of earlier turns, oldest first. A question that is
    not a follow-up, or has nothing to borrow, comes back unchanged.
    """
    question = question.strip()
    if not is_follow_up(question):
        return question
    analyzer = _analyzer()
    have = set(analyzer.terms(question))
    # A follow-up that names a code of its own asks about it, not the earlier one: "And 737-00-1028?"
    # after two questions on part 5520-1100-08 and E5100 borrowed both and was answered about them.
    # The earlier words (what was asked of the code) still carry over.
    own_code = bool(analyzer.codes(question))
    for previous in reversed(previous_queries):
        # "Is it true that ..." is how a claim was put, not what it is about.
        borrowed = key_terms(_CLAIM_FORM.sub("", previous, count=1), exclude=have)
        if own_code:
            borrowed = [word for word in borrowed if not analyzer.codes(word)]
        if borrowed:
            return f"{question} ({' '.join(borrowed)})"
    return question


def key_terms(text: str, *, exclude: Set[str] = frozenset()) -> list[str]:
    """The content words of ``text`` in order, once each, at most :data:`MAX_KEY_TERMS`.

    A word whose analyzed terms (stemmed, as the keyword index sees them) are all in ``exclude`` is
    left out, so "pumps" is not borrowed for a question that already says "pump".
    """
    analyzer = _analyzer()
    seen = set(exclude)
    out: list[str] = []
    for word in _WORD.findall(text):
        if not _is_content(_normal(word)):
            continue
        terms = analyzer.terms(word)
        if not terms or all(t in seen for t in terms):
            continue
        seen.update(terms)
        out.append(word)
        if len(out) == MAX_KEY_TERMS:
            break
    return out


def llm_rewrite(question: str, history: Sequence[Turn], llm: LLM, options: GenerationOptions) -> str | None:
    """The model's standalone query, or None when it failed or its reply is unusable or not accepted."""
    shown = history[-HISTORY_TURNS:]
    lines = []
    for turn in shown:
        lines += [f"User: {turn.question}", f"Assistant: {_shown_answer(turn.answer)}"]
    prompt = "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {question}\nStandalone query:"
    short = GenerationOptions(temperature=0.0, max_tokens=96, timeout=options.timeout)
    try:
        reply = complete(llm, [Message("system", REWRITE_PROMPT), Message("user", prompt)], short)
    except GenerationError:
        return None
    query = clean_reply(reply, question)
    if query is None or not accept_rewrite(query, question, shown):
        return None
    return query


def accept_rewrite(query: str, question: str, history: Sequence[Turn]) -> bool:
    """Whether ``query`` is a rewrite of ``question`` that resolved something from ``history``.

    It must keep every content word of the question (analyzed, so "serviced" may become "servicing")
    and add at least one word that the question lacks and the conversation has (its questions, their
    standalone queries or its answers).
    """
    analyzer = _analyzer()
    asked = set(analyzer.terms(question))
    got = set(analyzer.terms(query))
    kept = {t for word in key_terms(question) for t in analyzer.terms(word)}
    said = {
        t
        for turn in history
        for text in (turn.question, turn.standalone_query, _shown_answer(turn.answer))
        for t in analyzer.terms(text)
    }
    return kept <= got and bool((got - asked) & said)


def clean_reply(reply: str, question: str) -> str | None:
    """The query in a model's reply: its first line without labels or quotes; None if empty or overlong.

    Overlong means more than :func:`max_query_chars` for the question: a model that starts answering
    instead of rewriting must not become the search query.
    """
    line = next((ln.strip() for ln in reply.strip().splitlines() if ln.strip()), "")
    # The label may sit inside the quotes ('"Standalone query: Who invented ..."', the 0.5B model's).
    line = line.strip(_QUOTES).strip()
    line = re.sub(r"^(standalone\s+)?(search\s+)?(query|question)\s*:\s*", "", line, flags=re.IGNORECASE)
    line = line.strip().strip(_QUOTES).strip()
    if not line or len(line) > max_query_chars(question):
        return None
    return line


def _shown_answer(answer: str) -> str:
    """An earlier answer as the model sees it: one line, no citation marks, at most ANSWER_CHARS."""
    text = _CITATION_MARK.sub("", " ".join(answer.split()))
    return text if len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS].rstrip() + "\u2026"


def max_query_chars(question: str) -> int:
    """The longest rewrite accepted for ``question``: room for the topic, not for an answer."""
    return max(240, 3 * len(question))


def _normal(word: str) -> str:
    """``word`` lower-cased, a contraction's ending dropped ("what's", "whats": "what")."""
    lowered = _CONTRACTION.sub("", word.lower())
    return _BARE_CONTRACTIONS.get(lowered, lowered)


# A demonstrative followed by a colon or a quotation points forward, at what it introduces.
_OPENS_QUOTE_OR_COLON = re.compile(r":|(?:^|(?<=[\s(]))[\"'`\u201c\u2018]\S")
# Pairs that stand for something named before: "which one is safer?", "is the latter cheaper?".
_ANAPHORIC_PAIRS = frozenset(
    {
        ("which", "one"),
        ("which", "ones"),
        ("this", "one"),
        ("that", "one"),
        ("either", "one"),
        ("the", "former"),
        ("the", "latter"),
        ("the", "others"),
    }
)
# A comparison that leaves its other term to the conversation, unless the word after names it ("the
# same as X", "instead of X"); "different" and "compare" leave it open where they end the question ("is
# the newer one different?"), not before their object ("different from X", "compare X and Y").
_OPEN_COMPARISONS = {"same": "as", "instead": "of", "else": ""}  # "": no word closes it
_ENDING_COMPARISONS = frozenset({"different", "compare", "compares", "differ"})
# The conversation's document, named by its kind alone: "what does the manual say about leak test
# limits", "is the paper's sample size reported". A name or a topic after the kind makes it the
# question's own ("the guideline on sepsis"); one before it ("the sepsis guideline") is no direct pair.
_DOCUMENT_KINDS = frozenset(
    {
        "manual",
        "guide",
        "guideline",
        "guidelines",
        "paper",
        "study",
        "article",
        "review",
        "document",
        "doc",
        "runbook",
        "protocol",
        "policy",
        "trial",
        "report",
    }
)
_NAMING_AFTER_KIND = frozenset({"on", "of", "for", "about", "from", "by", "in", "called", "named", "titled"})
# The question words: those that open an embedded question, and the ones that ask for a person.
_WH = _EMBEDDING | {"who", "whom", "whose"}


def _leans_by_phrase(lowered: Sequence[str], *, named: bool) -> bool:
    """Whether the words (lower-cased, contractions dropped) hold a phrase that leaves its referent to
    the conversation: "which one", "the latter", an open comparison ("the same", "instead", "is the
    newer one different?"), the document named by its kind ("what does the manual say ..."), or a
    fragment opening with a preposition or "any" and asking nothing itself ("for a 15 kg child?",
    "any in marine species?"). A document named by its kind is the question's own when the question
    also ``named`` something specific ("the manual ... for the Lavazza LB 1100")."""
    n = len(lowered)
    for i, word in enumerate(lowered):
        after = lowered[i + 1] if i + 1 < n else None
        if after is not None and (word, after) in _ANAPHORIC_PAIRS:
            return True
        if (word in _OPEN_COMPARISONS and after != _OPEN_COMPARISONS[word]) or (
            word in _ENDING_COMPARISONS and after is None
        ):
            return True
        if word == "the" and after in _DOCUMENT_KINDS and not named:
            beyond = lowered[i + 2] if i + 2 < n else None
            if beyond not in _NAMING_AFTER_KIND:
                return True
    if n and (lowered[0] in _PREPOSITIONS or lowered[0] == "any"):
        return not any(w in _WH or w in _AUXILIARIES for w in lowered)
    return False


def _is_content(lowered: str) -> bool:
    return lowered not in ENGLISH_STOP_WORDS and lowered not in FILLER and lowered not in DEMONSTRATIVES


def _is_specific(word: str, position: int) -> bool:
    return (
        any(ch.isdigit() for ch in word)
        or (len(word) > 1 and word.isupper())
        or (position > 0 and word[:1].isupper())
    )


@functools.cache
def _analyzer() -> Analyzer:
    # One shared instance: the analyzer caches stemmed tokens.
    return Analyzer()
