"""``citeline eval``: ingest a BEIR corpus into its own namespace, run every query, score the ranking.

Each corpus entry becomes one document (title as its section heading); chunk hits are folded into
document rankings by each document's best chunk, as BEIR scores documents. Several configurations
(:mod:`citeline.eval.configs`) can be evaluated in one run over the same stored corpus; each gets a
bootstrap interval of its nDCG@10 and a paired test against the first, and ``folds`` cross-validates
choosing among them (:mod:`citeline.eval.stats`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from citeline.embed.base import Embedder
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.eval.configs import Config, backend_namespace, is_fixed, make_config
from citeline.eval.metrics import mrr_at, ndcg_at, percentile, recall_at
from citeline.eval.stats import (
    SHUFFLES,
    CrossValidation,
    PairedComparison,
    RepeatedCrossValidation,
    bootstrap_ci,
    check_folds,
    check_shuffles,
    cross_validate,
    paired_comparison,
    repeat_cross_validation,
)
from citeline.ingest import IngestOptions, IngestResult, Outcome, Source
from citeline.retrieve.search import SearchRequest, Timings
from citeline.settings import Settings
from citeline.store import catalog, model_migration
from citeline.types import LoadedSource, Page, Section, embedding_text

#: Chunks fetched per query for recall@100: enough that 100 distinct documents survive folding chunks
#: into documents.
CHUNK_DEPTH = 300


@dataclass(frozen=True)
class BeirData:
    """A BEIR folder, read: its queries and judgements checked line by line, its corpus read on demand."""

    folder: Path
    namespace: str
    corpus_path: Path
    #: The judged queries (those with at least one judgement in the split), by id, in file order.
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    #: Query ids the judgements name that ``queries.jsonl`` does not hold, in judgement order.
    unknown_queries: tuple[str, ...] = ()
    #: Query ids of ``queries.jsonl`` with no judgement in the split, in file order: not run.
    unjudged_queries: tuple[str, ...] = ()

    @cached_property
    def corpus_ids(self) -> tuple[str, ...]:
        """The corpus entries' ids, in file order, every line checked (see :func:`corpus_entries`);
        an id given twice is refused, as the second entry would replace the first."""
        seen: dict[str, int] = {}
        for n, doc_id, _, _ in corpus_entries(self.corpus_path):
            if doc_id in seen:
                raise _bad_line(
                    self.corpus_path, n, f"the _id {doc_id!r} is given twice (first on line {seen[doc_id]})"
                )
            seen[doc_id] = n
        return tuple(seen)


#: The first line of a qrels file may name its columns; BEIR writes this header.
QRELS_HEADER = "query-id"


def _bad_line(path: Path, n: int, reason: str) -> InvalidRequestError:
    return InvalidRequestError(f"{path}, line {n}: {reason}")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a UTF-8 file that hold something, numbered from 1, without their line ends (``\\n``
    or ``\\r\\n``) and without a byte-order mark at the start of the file."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise _bad_line(path, n, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
            if line.strip():
                yield n, line


def _objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSON-lines file, one a line, with their line numbers; blank lines skipped."""
    for n, line in _lines(path):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _bad_line(path, n, f"not JSON ({exc.msg}, column {exc.colno})") from exc
        if not isinstance(item, dict):
            raise _bad_line(path, n, f"a JSON object is expected, got {type(item).__name__}")
        yield n, item


def _entry_id(path: Path, n: int, item: Mapping[str, Any]) -> str:
    """The ``_id`` of a line: a string or an integer (``7`` is the id ``"7"`` of the qrels), not empty."""
    if "_id" not in item:
        raise _bad_line(path, n, 'no "_id"')
    value = item["_id"]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _bad_line(path, n, f'"_id" must be a string or an integer, got {json.dumps(value)}')
    if not str(value).strip():
        raise _bad_line(path, n, '"_id" is empty')
    return str(value)


def _string(path: Path, n: int, item: Mapping[str, Any], key: str, *, required: bool) -> str:
    """The string under ``key``; one left out or null is empty unless ``required``."""
    value = item.get(key)
    if value is None and not required:
        return ""
    if key not in item:
        raise _bad_line(path, n, f'no "{key}"')
    if not isinstance(value, str):
        raise _bad_line(path, n, f'"{key}" must be a string, got {json.dumps(value)}')
    return value


def corpus_entries(path: Path) -> Iterator[tuple[int, str, str, str]]:
    """``(line, id, title, text)`` of every entry of a ``corpus.jsonl``. ``text`` is required (it may be
    empty), ``title`` may be left out; a line that is not such an entry stops the reading with an error
    naming the file, the line and what is wrong."""
    for n, item in _objects(path):
        doc_id = _entry_id(path, n, item)
        title = _string(path, n, item, "title", required=False)
        yield n, doc_id, title, _string(path, n, item, "text", required=True)


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id -> corpus-id -> score`` from a qrels file: three fields separated by tabs, an integer
    score, the header line allowed first. A pair judged twice with different scores is refused."""
    qrels: dict[str, dict[str, int]] = {}
    first_seen: dict[tuple[str, str], int] = {}
    for i, (n, line) in enumerate(_lines(path)):
        if i == 0 and line.split()[0] == QRELS_HEADER:
            continue
        parts = [part.strip() for part in line.split("\t")]
        if len(parts) != 3:
            words = line.split()
            hint = (
                "; the fields must be separated by tabs"
                if len(words) == 3
                # Only a line that looks like TREC's: its second field is the unused iteration, 0 or Q0.
                else "; TREC qrels (query 0 document score) need the second column dropped"
                if len(words) == 4 and words[1] in ("0", "Q0")
                else ""
            )
            fields = f"got {len(parts)} field(s){hint}"
            raise _bad_line(path, n, f"expected query-id, corpus-id and score separated by tabs, {fields}")
        qid, doc, score_text = parts
        if not qid or not doc:
            raise _bad_line(path, n, "the query-id or the corpus-id is empty")
        try:
            score = int(score_text)
        except ValueError:
            header = (
                f"; the only header recognised is '{QRELS_HEADER}<TAB>corpus-id<TAB>score' (BEIR's): "
                "rename it or remove the line"
                if i == 0
                else ""
            )
            raise _bad_line(path, n, f"the score {score_text!r} is not an integer{header}") from None
        judged = qrels.setdefault(qid, {})
        if doc in judged and judged[doc] != score:
            raise _bad_line(
                path,
                n,
                f"query {qid!r} and document {doc!r} are judged again with another score "
                f"({score}; {judged[doc]} on line {first_seen[qid, doc]})",
            )
        judged[doc] = score
        first_seen.setdefault((qid, doc), n)
    return qrels


def _read_queries(path: Path) -> dict[str, str]:
    """Every query of a ``queries.jsonl`` by id, in file order; each needs an id and a text, once."""
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for n, item in _objects(path):
        qid = _entry_id(path, n, item)
        if qid in lines:
            raise _bad_line(path, n, f"the _id {qid!r} is given twice (first on line {lines[qid]})")
        text = _string(path, n, item, "text", required=True)
        if not text.strip():
            raise _bad_line(path, n, f'query {qid!r} has an empty "text"')
        queries[qid], lines[qid] = text, n
    return queries


def _followed(corpus: Path) -> Path:
    """The corpus file, following a link stored as text: a symbolic link checked out on a system (or
    copied by a tool) that does not keep links is a small file holding the target's relative path,
    which is how folders of claims share another folder's corpus."""
    if corpus.stat().st_size > 4096:
        return corpus
    text = corpus.read_text(encoding="utf-8", errors="replace").removeprefix("\ufeff").strip()
    if not text or "\n" in text or text.startswith("{"):
        return corpus
    target = (corpus.parent / text).resolve()
    if not target.is_file():
        raise InvalidRequestError(f"{corpus} names the corpus {text!r}, but {target} does not exist")
    return target


def load_beir(folder: Path, *, split: str = "test") -> BeirData:
    """Read and check queries and qrels; the corpus is read later (:attr:`BeirData.corpus_ids`).

    Errors name the missing file, or the file and line that is malformed and why. Only queries with a
    judgement in ``split`` are kept; a folder where no query has one is refused.
    """
    if folder.is_file():
        raise InvalidRequestError(
            f"{folder} is a file; citeline eval takes the BEIR folder that holds corpus.jsonl, "
            f"queries.jsonl and qrels/ (here perhaps {folder.parent})"
        )
    corpus = folder / "corpus.jsonl"
    queries_path = folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for path in (corpus, queries_path, qrels_path):
        if not path.is_file():
            raise InvalidRequestError(f"{folder} is not a BEIR folder: {path.name} is missing ({path})")
    corpus = _followed(corpus)
    qrels = _read_qrels(qrels_path)
    every_query = _read_queries(queries_path)
    queries = {qid: text for qid, text in every_query.items() if qid in qrels}
    if not queries:
        found = (
            f"its {len(qrels)} judged query id(s) ({', '.join(map(repr, list(qrels)[:3]))}, ...) are not ids "
            f"of {queries_path}"
            if qrels
            else "it holds no judgement"
        )
        raise InvalidRequestError(f"no query to run: {qrels_path} judges none of the queries ({found})")
    slug = re.sub(r"[^a-z0-9]+", "_", folder.resolve().name.lower()).strip("_") or "beir"
    unknown = tuple(qid for qid in qrels if qid not in every_query)
    unjudged = tuple(qid for qid in every_query if qid not in qrels)
    return BeirData(folder, f"eval_{slug}"[:41], corpus, queries, qrels, unknown, unjudged)


def judgement_warnings(data: BeirData) -> list[str]:
    """What in the judgements will not be measured as the folder's author may expect: judged queries that
    ``queries.jsonl`` lacks (left out), relevant documents the corpus lacks (no ranking can find them)
    and queries with no relevant document (they score 0), and queries with no judgement in the split
    (not run). Reads the corpus, so checks it too."""
    notes = []
    if data.unknown_queries:
        notes.append(
            f"judged queries that queries.jsonl does not hold are left out: {len(data.unknown_queries)} "
            f"(for example {data.unknown_queries[0]!r})"
        )
    in_corpus = set(data.corpus_ids)
    absent = [
        (qid, doc)
        for qid in data.queries
        for doc, g in data.qrels[qid].items()
        if g > 0 and doc not in in_corpus
    ]
    if absent:
        notes.append(
            f"relevant documents that corpus.jsonl does not hold: {len(absent)} (for example "
            f"{absent[0][1]!r} for query {absent[0][0]!r}); no ranking finds them, so their queries cannot "
            "reach a recall or nDCG of 1"
        )
    unanswerable = [qid for qid in data.queries if not any(g > 0 for g in data.qrels[qid].values())]
    if unanswerable:
        notes.append(
            f"queries with no relevant judgement (no score above 0), which score 0 on every metric: "
            f"{len(unanswerable)} (for example {unanswerable[0]!r})"
        )
    unjudged = data.unjudged_queries
    if unjudged:
        shown = ", ".join(unjudged[:_NAMED]) + (", ..." if len(unjudged) > _NAMED else "")
        notes.append(f"queries with no judgement in this split are not run: {len(unjudged)} ({shown})")
    return notes


#: How many ids a warning names before "...".
_NAMED = 5


def corpus_uri(namespace: str, doc_id: str) -> str:
    """Where a corpus entry is stored: by the namespace it is stored in, not by the folder it was read
    from, so a folder of other queries over the same corpus (SciFact's claims) finds its entries
    unchanged instead of storing the corpus a second time."""
    return f"beir://{namespace}/{doc_id}"


def corpus_sources(data: BeirData, namespace: str) -> Iterator[Source]:
    """One in-memory source per corpus entry, hashed so an unchanged entry is recognised next time."""
    for _, doc_id, title, text in corpus_entries(data.corpus_path):
        # PostgreSQL text cannot hold NUL; the loaders of files drop it the same way.
        title, text = title.replace("\x00", ""), text.replace("\x00", "")
        body = f"{title}\n\n{text}" if title else text
        digest = hashlib.sha256(body.encode()).hexdigest()

        def opener(body: str = body, title: str = title) -> LoadedSource:
            sections = (Section(0, title),) if title else ()
            return LoadedSource("text/plain", title, iter([Page(1, body, sections)]))

        yield Source(doc_id, corpus_uri(namespace, doc_id), doc_id, digest, opener)


#: Stages of a search, as :class:`Timings` names them (query embedding, dense, keyword, fusion, ...).
STAGES: tuple[str, ...] = tuple(f.name for f in fields(Timings))


#: The summary's ranking and latency keys, in the order the command has always printed them.
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "latency_p50_ms", "latency_p99_ms")


@dataclass(frozen=True)
class QueryResult:
    """One query run under one configuration, scored against its judgements."""

    config: str
    query_id: str
    query: str
    top10: tuple[str, ...]
    ndcg10: float
    recall10: float
    recall100: float
    mrr10: float
    #: 1-based rank of the first relevant document in the whole ranking; None if none was retrieved.
    first_relevant_rank: int | None
    latency_ms: float
    stages_ms: Mapping[str, float]

    def as_dict(self) -> dict[str, Any]:
        """One line of ``--per-query``."""
        return {
            "config": self.config,
            "query_id": self.query_id,
            "query": self.query,
            "ndcg@10": self.ndcg10,
            "recall@10": self.recall10,
            "recall@100": self.recall100,
            "mrr@10": self.mrr10,
            "first_relevant_rank": self.first_relevant_rank,
            "top10": list(self.top10),
            "latency_ms": self.latency_ms,
            "stages_ms": dict(self.stages_ms),
        }


@dataclass
class ConfigResult:
    """Every query's result under one configuration."""

    config: Config
    queries: list[QueryResult] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """Means of the ranking metrics, latency percentiles and the median of each search stage."""
        n = len(self.queries) or 1
        latencies = [q.latency_ms for q in self.queries]
        return {
            "fusion": self.config.settings.fusion.value,
            "settings": self.config.describe(),
            "queries": len(self.queries),
            "ndcg@10": sum(q.ndcg10 for q in self.queries) / n,
            "recall@10": sum(q.recall10 for q in self.queries) / n,
            "recall@100": sum(q.recall100 for q in self.queries) / n,
            "mrr@10": sum(q.mrr10 for q in self.queries) / n,
            "latency_p50_ms": percentile(latencies, 50),
            "latency_p99_ms": percentile(latencies, 99),
            "stage_p50_ms": {
                stage: percentile([q.stages_ms.get(stage, 0.0) for q in self.queries], 50) for stage in STAGES
            },
        }


@dataclass(frozen=True)
class Spread:
    """How sure one configuration's nDCG@10 is, and how it differs from the first configuration's."""

    #: Bootstrap interval of the mean nDCG@10 over queries (:func:`~citeline.eval.stats.bootstrap_ci`).
    ci: tuple[float, float]
    #: Against the first configuration, query by query; None for the first configuration itself.
    vs_first: PairedComparison | None

    def as_dict(self) -> dict[str, Any]:
        """The keys each configuration's figures gain in ``citeline eval --json``."""
        vs = self.vs_first
        return {
            "ndcg@10_ci": list(self.ci),
            "delta_vs_first": vs.delta if vs else None,
            "delta_vs_first_ci": list(vs.delta_ci) if vs else None,
            "p_vs_first": vs.p_value if vs else None,
            "verdict_vs_first": vs.verdict if vs else None,
            "differing_vs_first": vs.differing if vs else None,
        }


@dataclass(frozen=True)
class Evaluation:
    """One run of ``citeline eval``: the corpus ingest and the results of each configuration, in order."""

    dataset: str
    namespace: str
    corpus_added: int
    corpus_unchanged: int
    ingest_seconds: float
    results: list[ConfigResult]
    #: Folds of the cross-validation over the configurations; None for none.
    folds: int | None = None
    #: Deals of the queries into folds that :attr:`repeated_cross_validation` runs.
    shuffles: int = SHUFFLES
    #: Corpus entries not in the index (see :class:`CorpusIngest`).
    corpus_failed: int = 0

    @cached_property
    def spreads(self) -> dict[str, Spread]:
        """Each configuration's nDCG@10 interval and its paired comparison with the first, by name."""
        first = [q.ndcg10 for q in self.results[0].queries]
        spreads: dict[str, Spread] = {}
        for i, result in enumerate(self.results):
            scores = [q.ndcg10 for q in result.queries]
            if not scores:
                continue
            spreads[result.config.name] = Spread(
                bootstrap_ci(scores), paired_comparison(first, scores) if i else None
            )
        return spreads

    @cached_property
    def cross_validation(self) -> CrossValidation | None:
        """K-fold cross-validation of picking the configuration with the best nDCG@10, if ``folds``."""
        if self.folds is None:
            return None
        return cross_validate(self._ndcg_by_config(), self.folds)

    @cached_property
    def repeated_cross_validation(self) -> RepeatedCrossValidation | None:
        """The same choice cross-validated over :attr:`shuffles` deals of the queries, if ``folds``."""
        if self.folds is None:
            return None
        return repeat_cross_validation(self._ndcg_by_config(), self.folds, shuffles=self.shuffles)

    def _ndcg_by_config(self) -> dict[str, list[float]]:
        return {r.config.name: [q.ndcg10 for q in r.queries] for r in self.results}

    def summary(self) -> dict[str, Any]:
        """The JSON line of ``citeline eval --json``.

        The first configuration's figures keep the keys the command always had, so scripts reading
        ``ndcg@10`` go on working; ``configs`` maps every configuration's name to its figures, with
        its interval and its comparison with the first; ``cross_validation`` is there with ``folds``.
        """
        first = self.results[0].metrics()
        configs = {
            r.config.name: {
                **r.metrics(),
                **(self.spreads[r.config.name].as_dict() if r.config.name in self.spreads else {}),
            }
            for r in self.results
        }
        summary = {
            "dataset": self.dataset,
            "namespace": self.namespace,
            "fusion": first["fusion"],
            "queries": first["queries"],
            "corpus_added": self.corpus_added,
            "corpus_unchanged": self.corpus_unchanged,
            "ingest_seconds": self.ingest_seconds,
            **{key: first[key] for key in METRICS},
            "corpus_failed": self.corpus_failed,
            "config": self.results[0].config.name,
            "stage_p50_ms": first["stage_p50_ms"],
            "configs": configs,
        }
        cv = self.cross_validation
        if cv is not None:
            summary["cross_validation"] = {
                "folds": len(cv.folds),
                "seed": cv.seed,
                "held_out_ndcg@10": cv.held_out_mean,
                "picks": cv.picks,
                "best_in_sample": cv.best_in_sample,
                "best_in_sample_ndcg@10": cv.best_in_sample_mean,
                "per_fold": [
                    {"fold": f.index, "queries": len(f.held_out), "picked": f.picked, "ndcg@10": f.score}
                    for f in cv.folds
                ],
            }
        repeated = self.repeated_cross_validation
        if repeated is not None:
            summary["cross_validation"]["shuffles"] = {
                "count": repeated.shuffles,
                "first": repeated.first,
                "held_out_ndcg@10": repeated.held_out_mean,
                "held_out_ndcg@10_range": [min(repeated.held_out_means), max(repeated.held_out_means)],
                "above_first": repeated.above_first,
                "picks": repeated.picks,
                "delta_vs_first": repeated.vs_first.delta,
                "delta_vs_first_ci": list(repeated.vs_first.delta_ci),
                "p_vs_first": repeated.vs_first.p_value,
                "verdict_vs_first": repeated.vs_first.verdict,
            }
        return summary


class KnownVectors:
    """An embedder that takes the vectors another store holds for the same texts, of the same model
    (so the same vectors), and embeds only the texts it lacks: a second store of one corpus costs no
    second embedding, and two backends compared hold identical vectors."""

    def __init__(self, embedder: Embedder, known: Mapping[str, NDArray[np.float32]]) -> None:
        self.embedder = embedder
        self.known = known
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension
        self.max_tokens = embedder.max_tokens

    @classmethod
    def of(cls, store: Citeline, embedder: Embedder) -> KnownVectors:
        """The vectors of ``embedder``'s model that ``store`` holds for its active chunks, by text."""
        with store.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT c.id, c.text, c.context FROM chunks c JOIN documents d ON d.id = c.document_id "
                    "WHERE d.is_active AND c.embedding_model = :m"
                ),
                {"m": embedder.model_id},
            ).all()
            vectors = store.vector_index.vectors(conn, [int(r[0]) for r in rows])
        return cls(
            embedder,
            {
                embedding_text(text, context): vectors[int(cid)]
                for cid, text, context in rows
                if int(cid) in vectors
            },
        )

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        todo = [i for i, text in enumerate(texts) if text not in self.known]
        for i, text in enumerate(texts):
            if text in self.known:
                out[i] = self.known[text]
        if todo:
            out[todo] = self.embedder.embed([texts[i] for i in todo])
        return out


@dataclass(frozen=True)
class CorpusIngest:
    """What :func:`ingest_corpus` did with the corpus: every entry is in exactly one of the counts."""

    added: int
    unchanged: int
    #: Entries not in the index: failed now, or failed before with the same content and not tried again.
    failed: int
    seconds: float


def ingest_corpus(
    cl: Citeline, data: BeirData, console: Console, *, embedder: Embedder | None = None
) -> CorpusIngest:
    """Ingest (or find unchanged) every corpus entry, embedding with ``embedder`` if given (else the
    store's).

    An entry that failed before and has not changed since is not tried again: it would fail the same
    way and add a failed version on every run. A failed entry no longer in the corpus is deleted: it
    holds nothing searchable, and nothing but this command put it there. Failures are warned about on
    ``console``.
    """
    namespace = cl.settings.namespace
    uris = {corpus_uri(namespace, doc_id) for doc_id in data.corpus_ids}
    with cl.engine.connect() as conn:
        others = [
            uri
            for (uri,) in conn.execute(sa.text("SELECT DISTINCT source_uri FROM documents WHERE is_active"))
            if uri not in uris
        ]
    if others:
        # Scores over a corpus mixed with other documents are not the data set's scores, and deleting
        # them could delete a user's real documents: stop, and say what is in the way.
        raise InvalidRequestError(
            f"namespace {namespace!r} holds {len(others)} document(s) that are not entries of the corpus "
            f"of {data.folder} (for example {others[0]}); evaluate in a namespace of its own (name a new "
            f"one with `citeline --namespace NAME eval ...`), or, if they are entries since removed from "
            f"this corpus, delete them (`citeline --namespace {namespace} docs list`, then `docs delete ID`)"
        )
    failed_before = _failed_entries(cl, namespace, uris)
    ingestor = cl.ingestor(embedder=embedder)
    total = len(uris)
    counts = dict.fromkeys(Outcome, 0)
    failures: list[IngestResult] = []
    not_retried: list[tuple[str, str]] = []

    def sources() -> Iterator[Source]:
        for source in corpus_sources(data, namespace):
            failed = failed_before.get(source.uri)
            if failed is not None and failed[0] == source.content_hash:
                not_retried.append((source.label, failed[1]))
                progress.advance(task)
                continue
            yield source

    t0 = time.perf_counter()
    if not console.is_terminal:
        # No progress bar outside a terminal: a first run embeds the whole corpus for minutes, which a
        # script's log showed as nothing at all (--limit limits the queries, not the corpus).
        console.print(
            f"{data.folder.name}: checking {total} corpus entries in namespace {namespace} (new or "
            "changed ones are embedded: minutes on a first run; --limit limits the queries, not the corpus)",
            markup=False,
            highlight=False,
        )
    with Progress(
        *Progress.get_default_columns()[:-1],
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("ingesting corpus", total=total)

        def on_result(result: IngestResult) -> None:
            counts[result.outcome] += 1
            if result.outcome is Outcome.FAILED:
                failures.append(result)
            progress.advance(task)

        target = cl.settings.embedding_model
        with cl.engine.connect() as conn:
            current = catalog.ingest_model(conn, target)
        if current == target:
            ingestor.ingest(sources(), IngestOptions(), on_result)
        else:
            # The corpus was stored with another model: rebuild every entry with this one, staged, and
            # switch the namespace at once (an evaluation namespace needs no quality check to change).
            with cl.engine.begin() as conn:
                migration = model_migration.start(conn, target)
            ingestor.ingest(sources(), IngestOptions(), on_result, model=target)
            with cl.engine.begin() as conn:
                retired = model_migration.switch(conn, migration, forced=True)
            cl.remove_vectors(retired)
            cl.served_model(refresh=True)
    seconds = time.perf_counter() - t0
    failed_now = [(f.source, f.error or "no reason given") for f in failures]
    for entries, how in ((failed_now, "failed to ingest"), (not_retried, _NOT_RETRIED)):
        if entries:
            console.print(
                f"warning: {_entries(len(entries))} {how} ({_failure(*entries[0])}"
                + (f"; {len(entries) - 1} more" if len(entries) > 1 else "")
                + "): not in the index, so a query judged against "
                + ("it" if len(entries) == 1 else "them")
                + " cannot find it",
                style="yellow",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    return CorpusIngest(
        counts[Outcome.ADDED] + counts[Outcome.UPDATED] + counts[Outcome.STAGED],
        counts[Outcome.UNCHANGED] + counts[Outcome.RELABELLED],
        len(failures) + len(not_retried),
        seconds,
    )


_NOT_RETRIED = "unchanged since it failed, not tried again"


def _entries(n: int) -> str:
    return f"{n} corpus entr{'y' if n == 1 else 'ies'}"


def _failure(entry: str, error: str) -> str:
    # The ingest's reasons already name the source ("emptyall: no text to index"): name it once.
    return error if error.startswith(f"{entry}: ") else f"{entry}: {error}"


def _failed_entries(cl: Citeline, namespace: str, uris: set[str]) -> dict[str, tuple[str | None, str]]:
    """The corpus entries whose last attempt failed and that have no active version: uri -> (content
    hash, reason). Failed entries of this corpus's namespace that the corpus no longer holds are
    deleted here, so they neither linger nor count."""
    prefix = corpus_uri(namespace, "")
    failed: dict[str, tuple[str | None, str]] = {}
    with cl.engine.begin() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT d.document_id, d.source_uri, d.content_hash, d.error FROM documents d "
                "WHERE d.status = 'failed' AND left(d.source_uri, length(:p)) = :p AND NOT EXISTS "
                "(SELECT 1 FROM documents a WHERE a.source_uri = d.source_uri AND a.is_active)"
            ),
            {"p": prefix},
        ).all()
        # Deleted as every document is (a failed version holds no chunk, vector or file of a corpus
        # entry, so its rows are all there is to remove).
        for document_id in dict.fromkeys(doc for doc, uri, _, _ in rows if uri not in uris):
            catalog.delete_document(conn, document_id)
        for _, uri, content_hash, error in rows:
            if uri in uris:
                failed[uri] = (content_hash, error or "no reason given")
    return failed


def check_limit(limit: int | None) -> None:
    """Refuse a query limit below one: it would run no query, or (sliced) all but the last few."""
    if limit is not None and limit < 1:
        raise InvalidRequestError(f"limit (--limit) is the number of queries to run, at least 1; got {limit}")


def evaluate(
    cl: Citeline,
    data: BeirData,
    configs: Sequence[Config] | None = None,
    *,
    limit: int | None = None,
    folds: int | None = None,
    shuffles: int = SHUFFLES,
    console: Console | None = None,
) -> Evaluation:
    """Ingest (or reuse) the corpus, run every query under every configuration, score the rankings.

    Without ``configs`` the current settings are evaluated as one configuration named ``default``.
    The configurations take turns query by query, so a slow spell of a shared machine falls on all of
    them alike. A configuration on another vector backend than ``cl``'s searches its own store: the
    corpus ingested into :func:`~citeline.eval.configs.backend_namespace` with that backend. ``folds``
    cross-validates choosing among the configurations (:attr:`Evaluation.cross_validation`), over
    ``shuffles`` deals of the queries as well (:attr:`Evaluation.repeated_cross_validation`); both are
    checked before anything is ingested.
    """
    console = console or Console(stderr=True)
    configs = list(configs) if configs else [make_config("default", {}, cl.settings)]
    check_limit(limit)
    query_ids = list(data.queries)[:limit] if limit is not None else list(data.queries)
    if folds is not None:
        check_folds(folds, len(query_ids))
        check_shuffles(shuffles)
    for config in configs:
        changed = [
            k
            for k in Settings.model_fields
            if is_fixed(k) and getattr(config.settings, k) != getattr(cl.settings, k)
        ]
        if changed:
            raise InvalidRequestError(
                f"configuration {config.name!r} differs from the open store in {', '.join(changed)}; "
                "build configurations from the settings of the Citeline that runs them"
            )
    stores = _stores(cl, configs)
    searchers: dict[str, Citeline] = {}
    try:
        added = unchanged = failed = 0
        ingest_seconds = 0.0
        for store in stores.values():
            # Another backend's store takes the vectors the open store computed instead of embedding.
            known = None if store is cl else KnownVectors.of(cl, store.embedder)
            ingest = ingest_corpus(store, data, console, embedder=known)
            added, unchanged, failed = (
                added + ingest.added,
                unchanged + ingest.unchanged,
                failed + ingest.failed,
            )
            ingest_seconds += ingest.seconds
        results = [ConfigResult(config) for config in configs]
        # One instance per configuration, sharing its store's engine, embedder and keyword index.
        # Every timed search embeds its query, as a new question does: no vector comes from another
        # configuration's search of the same query.
        for config in configs:
            store = stores[config.settings.vector_backend]
            searchers[config.name] = store.derive(
                config.settings, namespace=store.settings.namespace, query_cache_size=0
            )
        if query_ids:
            # The first search loads the in-memory keyword index (and any model a configuration needs):
            # one untimed search per configuration keeps that out of the latencies.
            for searcher in searchers.values():
                searcher.search(SearchRequest(data.queries[query_ids[0]]))
        _run_queries(data, query_ids, results, searchers, console)
    finally:
        for searcher in searchers.values():
            searcher.close()
        for store in stores.values():
            if store is not cl:
                store.close()
    return Evaluation(
        data.folder.name,
        cl.settings.namespace,
        added,
        unchanged,
        round(ingest_seconds, 1),
        results,
        folds,
        shuffles,
        failed,
    )


def _stores(cl: Citeline, configs: Sequence[Config]) -> dict[str, Citeline]:
    """The store each vector backend the configurations name is searched in: ``cl`` for its own, a
    namespace of its own for each other (opened here; the caller closes it)."""
    stores: dict[str, Citeline] = {cl.settings.vector_backend: cl}
    for config in configs:
        backend = config.settings.vector_backend
        if backend not in stores:
            namespace = backend_namespace(cl.settings.namespace, backend)
            stores[backend] = Citeline(
                cl.settings.model_copy(update={"vector_backend": backend, "namespace": namespace})
            )
    return stores


def _run_queries(
    data: BeirData,
    query_ids: Sequence[str],
    results: Sequence[ConfigResult],
    searchers: Mapping[str, Citeline],
    console: Console,
) -> None:
    """Run every query under every configuration, query by query, and score the rankings."""
    with Progress(
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("queries", total=len(query_ids) * len(results))
        for qid in query_ids:
            for result in results:
                timings = Timings()
                settings = result.config.settings
                # The @10 metrics and the latency come from the search users get: a search fuses
                # max(candidates, top-k) hits from each side, so asking for max(candidates, 10) hits
                # ranks them as a top-10 search does, with enough chunks left for 10 documents.
                # recall@100 needs a deeper search, whose fusion sees more candidates.
                searcher = searchers[result.config.name]
                start = time.perf_counter()
                hits = searcher.search(
                    SearchRequest(data.queries[qid], top_k=max(settings.candidates, 10)), timings=timings
                )
                latency = (time.perf_counter() - start) * 1e3
                deep = searcher.search(
                    SearchRequest(data.queries[qid], top_k=max(CHUNK_DEPTH, settings.candidates))
                )
                ranked = list(dict.fromkeys(hit.document_name for hit in hits))
                ranked_deep = list(dict.fromkeys(hit.document_name for hit in deep))
                result.queries.append(
                    _score(result.config.name, qid, data, ranked, ranked_deep, latency, asdict(timings))
                )
                progress.advance(task)


def _score(
    config: str,
    qid: str,
    data: BeirData,
    ranked: list[str],
    ranked_deep: list[str],
    latency: float,
    stages: dict[str, float],
) -> QueryResult:
    relevant = data.qrels[qid]
    # The rank in the search users get, as top10 and mrr@10 read it; only past its end, the deeper
    # search's (whose fusion sees more candidates, so its first places may differ).
    first = next((i for i, doc in enumerate(ranked, start=1) if relevant.get(doc, 0) > 0), None)
    if first is None:
        deep = next((i for i, doc in enumerate(ranked_deep, start=1) if relevant.get(doc, 0) > 0), None)
        first = None if deep is None else max(deep, len(ranked) + 1)
    return QueryResult(
        config=config,
        query_id=qid,
        query=data.queries[qid],
        top10=tuple(ranked[:10]),
        ndcg10=ndcg_at(ranked, relevant, 10),
        recall10=recall_at(ranked, relevant, 10),
        recall100=recall_at(ranked_deep, relevant, 100),
        mrr10=mrr_at(ranked, relevant, 10),
        first_relevant_rank=first,
        latency_ms=latency,
        stages_ms=stages,
    )
