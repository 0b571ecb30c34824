"""Text to keyword terms, used the same way when indexing and when querying.

Ordinary words are lowercased, stop words dropped and Snowball-stemmed. Technical tokens are kept
whole and unstemmed: hyphenated terms and acronyms (``LDL-C``, ``FH``, ``BMI``) and tokens mixing
letters and digits (``COVID-19``, ``p53``); their parts are indexed too, so ``LDL cholesterol``
still matches ``LDL-C``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise

import Stemmer

from citeline.errors import ConfigError
from citeline.settings import Settings

# Words joined by hyphens, slashes or apostrophes stay one token; a leading sign or decimals stay on numbers.
_TOKEN = re.compile(r"[^\W_]+(?:[-'\u2019/.][^\W_]+)*", re.UNICODE)
_JOINERS = re.compile(r"[-'\u2019/.]")
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)

ENGLISH_STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)


@dataclass(frozen=True)
class Analyzer:
    """A keyword analyzer. Each step can be switched off, and the stop list extended per index."""

    lowercase: bool = True
    stem: bool = True
    stop_words: bool = True
    keep_technical: bool = True
    extra_stop_words: frozenset[str] = field(default_factory=frozenset)
    language: str = "english"

    @classmethod
    def from_settings(cls, settings: Settings) -> Analyzer:
        """The analyzer the ``keyword_*`` settings describe."""
        if settings.keyword_language not in Stemmer.algorithms():
            raise ConfigError(
                f"keyword_language {settings.keyword_language!r} has no Snowball stemmer; "
                f"choose one of {', '.join(sorted(Stemmer.algorithms()))}"
            )
        return cls(
            lowercase=settings.keyword_lowercase,
            stem=settings.keyword_stem,
            stop_words=settings.keyword_stop_words,
            keep_technical=settings.keyword_keep_technical,
            extra_stop_words=frozenset(
                w.strip().lower() for w in settings.keyword_extra_stop_words if w.strip()
            ),
            language=settings.keyword_language,
        )

    def config(self) -> dict[str, object]:
        """What decides the terms, as JSON: an index built with one config is searched with the same."""
        return {
            "lowercase": self.lowercase,
            "stem": self.stem,
            "stop_words": self.stop_words,
            "keep_technical": self.keep_technical,
            "extra_stop_words": sorted(self.extra_stop_words),
            "language": self.language,
        }

    @cached_property
    def _stemmer(self) -> Stemmer.Stemmer:
        return Stemmer.Stemmer(self.language)

    @cached_property
    def _stops(self) -> frozenset[str]:
        base = ENGLISH_STOP_WORDS if self.stop_words else frozenset()
        return base | {w.lower() for w in self.extra_stop_words}

    @cached_property
    def _stemmed_stops(self) -> frozenset[str]:
        # Domain stop words are given as words ("patient") but must also drop their forms ("patients").
        return frozenset(self._stem(w.lower()) for w in self.extra_stop_words)

    @cached_property
    def _cache(self) -> dict[str, tuple[str, ...]]:
        return {}

    def terms(self, text: str) -> list[str]:
        """The terms of ``text``, in order, with repeats (a term's count is its frequency)."""
        out: list[str] = []
        cache = self._cache
        for match in _TOKEN.finditer(text):
            token = match.group()
            found = cache.get(token)
            if found is None:
                found = self._token_terms(token)
                # Text repeats its vocabulary: caching per token makes analysis several times faster.
                if len(cache) < _CACHE_LIMIT:
                    cache[token] = found
            out.extend(found)
        return out

    def _token_terms(self, raw: str) -> tuple[str, ...]:
        terms = self._whole_terms(raw)
        if len(raw) > MAX_TERM_CHARS:
            # A term is a key of the keyword indexes, and PostgreSQL refuses a key over 2,704 bytes: a
            # run of Chinese between two punctuation marks, or a long base64 string, failed the ingest
            # of every document stored with it. Queries are cut alike, so the term still matches.
            return tuple(dict.fromkeys(t[:MAX_TERM_CHARS] for t in terms))
        return terms

    def _whole_terms(self, raw: str) -> tuple[str, ...]:
        stops = self._stops
        token = _POSSESSIVE.sub("", raw)
        if self.lowercase:
            token = token.lower()
        if self.keep_technical and _is_technical(raw):
            parts = [p for p in _JOINERS.split(token) if p and p.lower() not in stops]
            return (token, *(self._stem(p) for p in parts)) if len(parts) > 1 else (token,)
        words = _JOINERS.split(token) if not self.keep_technical else (token,)
        stems = (self._stem(w) for w in words if w and w.lower() not in stops)
        return tuple(t for t in stems if t not in self._stemmed_stops)

    def term_counts(self, text: str) -> Counter[str]:
        """Each term of ``text`` with its frequency."""
        return Counter(self.terms(text))

    def query_terms(self, query: str) -> Counter[str]:
        """The terms a keyword search for ``query`` looks for: its :meth:`term_counts`, and the term of
        each pair of neighbouring words written together.

        Readers split a compound the documents write whole ("back up" for "backup", "set up", "log
        in", "over expression"): the words alone then match nothing that says it, or ("up", "in")
        are stop words and match nothing at all. The joined term is only an extra: where no document
        holds it ("expressionof"), it scores nothing. Two stop words are not joined ("do I" would
        look for DOIs), nor words split by anything but spaces ("back, up"); a join that makes a stop
        word ("him self") gives no term, as the word would not.
        """
        counts = self.term_counts(query)
        words = list(_TOKEN.finditer(query))
        stops = self._stops
        for first, second in pairwise(words):
            left, right = first.group(), second.group()
            if query[first.end() : second.start()].strip() or not (left.isalpha() and right.isalpha()):
                continue
            # Two stop words, or a stop word and a letter or two ("in T", "is e"), join into noise ("doi",
            # "int"), not a compound.
            stop_left, stop_right = left.lower() in stops, right.lower() in stops
            if (stop_left and (stop_right or len(right) < 3)) or (stop_right and len(left) < 3):
                continue
            for term in self._whole_terms(left + right):
                if term not in counts:
                    counts[term] = 1
        # A code is written with its separators or without them ("E11.65" and "E1165", "737-31-1860"
        # and "737311860"): the squashed term finds the passages that write it squashed. (The other
        # way round, a squashed code in the query, needs the index's own spellings: see
        # :meth:`unjoined_codes`.)
        for word in _words(query):
            if _is_code(word) and _JOINERS.search(word) and not _DECIMAL.search(word):
                whole = self._whole_terms(word)
                squashed = squash(whole[0]) if whole else ""
                if len(squashed) >= MIN_UNJOINED_CODE and squashed not in counts:
                    counts[squashed] = 1
        return counts

    def unjoined_codes(self, query: str) -> list[str]:
        """The terms of the codes ``query`` writes without separators ("E1165", "737311860"), which a
        document may write with them ("E11.65", "737-31-1860"): the index's terms that squash to one
        of these (:func:`citeline.store.keyword.code_spellings`) are looked for beside it.

        A word of letters and digits of at least :data:`MIN_UNJOINED_CODE` characters, with a digit: a
        shorter one ("E11", "2019") squashes from too many things to say which it stands for.
        """
        found: list[str] = []
        for word in _words(query):
            if len(word) >= MIN_UNJOINED_CODE and word.isalnum() and any(c.isdigit() for c in word):
                term = self._whole_terms(word)
                if term and term[0] not in found:
                    found.append(term[0])
        return found

    def only_codes(self, query: str) -> bool:
        """Whether ``query``, stop words and the words a lookup is asked with aside, is nothing but
        codes: words with a digit that are kept whole ("737-31-1860", "E4021", "rs11614913", "What is
        TRAF6?", "What does E4021 mean?", "error code E4021").

        Such a query asks for the passages that write the code. Its vector means little (the dense list
        of "rs11614913" is a flat list of passages about other variants), so the search weighs its
        keyword list as it weighs the dense list of a query in words. A word that says more than what
        is asked about ("E4021 overheating") makes it a query in words.
        """
        words = [w for w in _words(query) if w.lower() not in self._stops and w.lower() not in LOOKUP_WORDS]
        # A long number asked alone is a part or order number typed without its separators.
        return bool(words) and all(_is_code(w) or _is_long_number(w) for w in words)

    @staticmethod
    def codes(text: str) -> list[str]:
        """The codes ``text`` writes, in order: words with a digit that are kept whole (as
        :meth:`only_codes` reads them), dashes written as the hyphen."""
        return [w for w in _words(text) if _is_code(w)]

    def _stem(self, word: str) -> str:
        return str(self._stemmer.stemWord(word)) if self.stem else word


_CACHE_LIMIT = 500_000

#: The words a lookup of a code is asked with, beside the code and stop words: what kind of code it is
#: ("error code E4021", "part number 737-31-1860") and what is asked of it ("What does E4021 mean?",
#: "What does SB-014 stand for?", "Explain E4021"). They say nothing a passage holding the code would be
#: chosen by. (Written from how readers ask, before measuring; ``bench.code_lookup`` asks four forms.)
LOOKUP_WORDS = frozenset(
    {
        "mean",
        "means",
        "meaning",
        "stand",
        "stands",
        "code",
        "codes",
        "error",
        "fault",
        "number",
        "part",
        "refer",
        "refers",
        "define",
        "definition",
        "explain",
        "look",
        "lookup",
        "find",
        "show",
        "tell",
    }
)
#: Dashes a code may be printed with, read as the hyphen by :meth:`Analyzer.only_codes`.
_CODE_DASHES = str.maketrans(dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2212", "-"))

#: Terms are cut to this many characters (at most 4 bytes each in UTF-8): far under PostgreSQL's limit on
#: an index key, far over any word or code a reader types.
MAX_TERM_CHARS = 200


#: The fewest characters of a squashed code that is looked for in its other spelling.
MIN_UNJOINED_CODE = 5
#: A point between a number and a digit is a decimal point ("1.5mg"), not a code's separator: squashed,
#: 1.5 mg would read as 15 mg.
_DECIMAL = re.compile(r"(?:^|[-/'\u2019])\d+\.\d")


def squash(term: str) -> str:
    """``term`` without the separators a token joins ("e11.65" -> "e1165", "737-31-1860" -> "737311860")."""
    return _JOINERS.sub("", term)


def _words(text: str) -> list[str]:
    # PDFs print codes with other dashes ("737\u201331\u20131860", "FAA\u20132020\u20130686"), which
    # split them into plain numbers: read as the hyphen, they are the codes they are.
    return [m.group() for m in _TOKEN.finditer(text.translate(_CODE_DASHES))]


def _is_long_number(word: str) -> bool:
    return word.isdigit() and len(word) >= MIN_UNJOINED_CODE


def _is_code(word: str) -> bool:
    return any(c.isdigit() for c in word) and _is_technical(word)


def _is_technical(token: str) -> bool:
    """Acronyms, hyphenated compounds and letter-digit mixes: exact terms a reader searches for verbatim."""
    if token.isalpha() and (token.islower() or token.istitle()):
        return False
    if any(c in token for c in "-/") and len(token) > 2:
        return True
    upper = sum(c.isupper() for c in token)
    if upper >= 2 and upper * 2 >= sum(c.isalpha() for c in token):
        return True
    has_digit = any(c.isdigit() for c in token)
    return has_digit and any(c.isalpha() for c in token)


#: Characters of a page :class:`DocumentTerms` holds before it analyses what it has.
_ANALYSED_EVERY = 1_000_000


class DocumentTerms:
    """The keyword terms of a whole document, gathered from its chunks in order.

    Chunks overlap and leave out the whitespace between them, so the text they cover is put back
    together page by page (each chunk adds only what lies past the previous one's end) and analysed
    a page at a time: the counts are those of the document's text, each word once, and a long
    document is never held whole. Ingest feeds it chunk drafts as they are cut; a store indexed
    before document terms existed feeds it its stored chunks.
    """

    def __init__(self, analyzer: Analyzer) -> None:
        self._analyzer = analyzer
        self._counts: Counter[str] = Counter()
        self._page: int | None = None
        self._pieces: list[str] = []
        self._held = 0  # characters in _pieces
        self._end = 0

    def add(self, page: int, start: int, end: int, text: str) -> None:
        """Add a chunk: ``text`` spans ``start:end`` of page ``page``; chunks come in document order."""
        if page != self._page:
            self._flush()
            self._page = page
        elif start < self._end:
            text = text[self._end - start :]
        elif self._pieces:
            self._pieces.append(" ")
        self._pieces.append(text)
        self._held += len(text)
        self._end = max(self._end, end)
        if self._held >= _ANALYSED_EVERY:
            self._analyse_settled()

    def counts(self) -> Counter[str]:
        """Every term of the chunks added so far, with its number of occurrences."""
        self._flush()
        return self._counts

    def _analyse_settled(self) -> None:
        """Analyse the text held up to its last whitespace, which no term crosses (the rest may end in
        half a word): a page is analysed as it is added, not all at once when it ends, so a build that
        adds a long page (a 50 MB text is one) is never held by the analysis for long, nor holds the
        page whole."""
        text = "".join(self._pieces)
        cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t")) + 1
        if cut > 0:
            self._counts.update(self._analyzer.terms(text[:cut]))
            text = text[cut:]
        self._pieces, self._held = [text], len(text)

    def _flush(self) -> None:
        if self._pieces:
            self._counts.update(self._analyzer.terms("".join(self._pieces)))
        self._pieces, self._held, self._end = [], 0, 0
