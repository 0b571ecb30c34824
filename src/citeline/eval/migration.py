"""The quality check before a namespace switches embedding model.

Both spaces are complete while a migration runs (see :mod:`citeline.store.model_migration`): the active
versions embedded by the served model, the staged twins by the target. The check ranks the same
queries in both, by dense retrieval, the only stage of search a change of model changes (the keyword
side reads the same chunk texts in both):

- with gold questions (a BEIR folder, or a JSONL file of questions naming their relevant
  documents), the nDCG@10 of each query in each space, and the paired bootstrap interval of the
  difference (:func:`citeline.eval.stats.paired_comparison`, as ``citeline eval`` reports it). It
  passes when that interval stays above ``-migration_max_loss``: the new model is shown to lose at
  most that much, on these questions, at 95%.
- without them, a seeded sample of the namespace's own chunks is used as queries, and the check
  measures how much of the old top-10 the new top-10 keeps (chunks matched by document and
  position). It passes when the mean overlap is at least ``migration_min_overlap``: a guard against a
  broken or unrelated model (a wrong tokenizer, the wrong weights), not a proof that the new one is
  better, which needs gold questions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.embed.base import Embedder
from citeline.errors import InvalidRequestError
from citeline.eval.metrics import ndcg_at
from citeline.eval.stats import bootstrap_ci, paired_comparison
from citeline.retrieve.filters import Filters
from citeline.settings import Settings
from citeline.store.catalog import DocumentInfo
from citeline.store.index import InScope, VectorIndex, VectorQuery

#: Chunks each space returns per query: enough for ten distinct documents in the ranking.
_DEPTH = 100
#: Queries embedded per call.
_BATCH = 64


@dataclass(frozen=True)
class GoldQuestion:
    """A question and the documents that answer it (names, file stems or ids), with their grades."""

    text: str
    relevant: dict[str, int]


@dataclass(frozen=True)
class CheckResult:
    """What the quality check measured and whether the switch may go ahead."""

    #: ``ndcg@10`` (gold questions) or ``overlap@10`` (the namespace's own chunks as queries).
    method: str
    passed: bool
    #: Queries the figures are over.
    queries: int
    #: The old and new space's mean (nDCG@10), or the mean overlap (in ``new``; ``old`` is None).
    old: float | None
    new: float
    #: The 95% bootstrap interval of ``new``.
    new_ci: tuple[float, float]
    #: Gold questions: the paired difference new minus old, its interval, p-value, verdict and the
    #: questions whose two scores differ, as ``citeline eval`` gives each configuration against the
    #: first (:class:`~citeline.eval.stats.PairedComparison`).
    delta: float | None = None
    delta_ci: tuple[float, float] | None = None
    p_value: float | None = None
    verdict: str | None = None
    differing: int | None = None
    #: The rule applied, in words (with the threshold setting it used).
    rule: str = ""
    #: Where the gold questions came from, if any.
    gold: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_gold(path: Path) -> list[GoldQuestion]:
    """Gold questions from a BEIR folder (queries.jsonl and qrels/test.tsv) or a JSONL file of
    ``{"question": ..., "relevant": ["name.pdf", ...] | {"name.pdf": grade}}`` lines."""
    if path.is_dir():
        from citeline.eval.beir import load_beir  # the BEIR runner imports the engine, which imports this

        data = load_beir(path)
        return [GoldQuestion(text, dict(data.qrels[qid])) for qid, text in data.queries.items()]
    if not path.is_file():
        raise InvalidRequestError(f"{path}: no such BEIR folder or file of gold questions")
    out: list[GoldQuestion] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                text = str(item.get("question") or item.get("query") or "")
                relevant = item["relevant"]
            except (ValueError, KeyError, AttributeError) as exc:
                raise InvalidRequestError(
                    f'{path} line {n}: expected {{"question": "...", "relevant": ["document name", ...]}}'
                ) from exc
            grades = (
                {str(k): int(v) for k, v in relevant.items()}
                if isinstance(relevant, dict)
                else {str(k): 1 for k in relevant}
            )
            if text.strip() and grades:
                out.append(GoldQuestion(text, grades))
    if not out:
        raise InvalidRequestError(f"{path} holds no gold question")
    return out


@dataclass(frozen=True)
class Space:
    """One vector space of the namespace: a model and the versions embedded by it."""

    model: str
    embedder: Embedder
    versions: Sequence[DocumentInfo]

    def scope(self, conn: sa.Connection) -> tuple[list[uuid.UUID], int, int]:
        ids = [v.version_id for v in self.versions]
        chunks = sum(v.vector_count for v in self.versions)
        total = int(
            conn.execute(
                sa.text("SELECT count(*) FROM chunks WHERE embedding_model = :m"), {"m": self.model}
            ).scalar_one()
        )
        return ids, chunks, max(total, chunks)


def _embed(embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
    parts = [embedder.embed(list(texts[i : i + _BATCH])) for i in range(0, len(texts), _BATCH)]
    return np.concatenate(parts) if parts else np.empty((0, embedder.dimension), dtype=np.float32)


def _rankings(
    conn: sa.Connection, index: VectorIndex, space: Space, queries: Sequence[str], depth: int
) -> list[list[int]]:
    """Each query's nearest chunks in ``space``, best first, as the namespace's vector index finds them
    (the space's versions as the scope: the staged ones are not active yet)."""
    ids, chunks, total = space.scope(conn)
    scope = InScope(ids, chunks, total)
    vectors = _embed(space.embedder, queries)
    return [
        [cid for cid, _ in index.search(conn, VectorQuery(vector, space.model, Filters(), scope, depth))]
        for vector in vectors
    ]


def _chunk_keys(conn: sa.Connection, chunk_ids: set[int]) -> dict[int, tuple[uuid.UUID, int]]:
    """Each chunk's document (the id all its versions share) and position: the same chunk of the same
    content in either space."""
    rows = conn.execute(
        sa.text(
            "SELECT c.id, d.document_id, c.chunk_index FROM chunks c "
            "JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(:ids)"
        ),
        {"ids": list(chunk_ids)},
    )
    return {int(r[0]): (r[1], int(r[2])) for r in rows}


def gold_check(
    engine: sa.Engine,
    index: VectorIndex,
    old: Space,
    new: Space,
    questions: Sequence[GoldQuestion],
    settings: Settings,
    *,
    source: str,
) -> CheckResult:
    """nDCG@10 of ``questions`` in both spaces, compared query by query (see the module docstring)."""
    # Relevant documents are named as users know them: by name, by file name without its suffix
    # (a BEIR corpus stored as <id>.txt), or by id.
    names: dict[str, uuid.UUID] = {}
    for doc in old.versions:
        for key in (str(doc.id), doc.name, Path(doc.name).stem):
            names.setdefault(key, doc.id)
    kept: list[tuple[str, dict[str, int]]] = []
    dropped: list[str] = []
    for q in questions:
        relevant = {str(names[k]): g for k, g in q.relevant.items() if k in names and g > 0}
        if relevant:
            kept.append((q.text, relevant))
        else:
            dropped.append(q.text)
    if not kept:
        raise InvalidRequestError(
            f"{source}: none of its questions names a document of this namespace (relevant documents "
            "are matched by name, by name without its extension, or by document id)"
        )
    texts = [text for text, _ in kept]
    with engine.connect() as conn:
        old_ranked = _rankings(conn, index, old, texts, _DEPTH)
        new_ranked = _rankings(conn, index, new, texts, _DEPTH)
        keys = _chunk_keys(conn, {c for r in old_ranked + new_ranked for c in r})

    def documents(ranked: list[int]) -> list[str]:
        return list(dict.fromkeys(str(keys[c][0]) for c in ranked if c in keys))

    old_scores = [ndcg_at(documents(r), rel, 10) for r, (_, rel) in zip(old_ranked, kept, strict=True)]
    new_scores = [ndcg_at(documents(r), rel, 10) for r, (_, rel) in zip(new_ranked, kept, strict=True)]
    paired = paired_comparison(old_scores, new_scores)
    floor = -settings.migration_max_loss
    return CheckResult(
        method="ndcg@10",
        passed=paired.delta_ci[0] >= floor,
        queries=len(kept),
        old=float(np.mean(old_scores)),
        new=float(np.mean(new_scores)),
        new_ci=bootstrap_ci(new_scores),
        delta=paired.delta,
        delta_ci=paired.delta_ci,
        p_value=paired.p_value,
        verdict=paired.verdict,
        differing=paired.differing,
        rule=f"the 95% interval of nDCG@10 new minus old must stay above {floor:g} "
        "(CITELINE_MIGRATION_MAX_LOSS)",
        gold=source,
        # The questions none of whose relevant documents is in the namespace: not scored, and said so.
        extra={"old_ci": bootstrap_ci(old_scores), "questions_given": len(questions), "dropped": dropped},
    )


def overlap_check(
    engine: sa.Engine, index: VectorIndex, old: Space, new: Space, settings: Settings
) -> CheckResult:
    """Overlap of the old and new top-10 for a seeded sample of the namespace's chunks used as queries."""
    ids = [v.version_id for v in old.versions]
    with engine.connect() as conn:
        # md5 of the id: a fixed pseudo-random order, so the same namespace always gives the same sample.
        texts = list(
            conn.execute(
                sa.text(
                    "SELECT text FROM chunks WHERE document_id = ANY(CAST(:ids AS uuid[])) "
                    "ORDER BY md5(id::text) LIMIT :n"
                ),
                {"ids": ids, "n": settings.migration_sample},
            ).scalars()
        )
        if not texts:
            raise InvalidRequestError("this namespace holds no chunk to sample queries from")
        old_ranked = _rankings(conn, index, old, texts, 10)
        new_ranked = _rankings(conn, index, new, texts, 10)
        keys = _chunk_keys(conn, {c for r in old_ranked + new_ranked for c in r})
    overlaps = [
        # Out of ten, or of all there are in a namespace of fewer chunks.
        len({keys[c] for c in a if c in keys} & {keys[c] for c in b if c in keys}) / max(len(a), len(b), 1)
        for a, b in zip(old_ranked, new_ranked, strict=True)
    ]
    mean = float(np.mean(overlaps))
    floor = settings.migration_min_overlap
    return CheckResult(
        method="overlap@10",
        passed=mean >= floor,
        queries=len(texts),
        old=None,
        new=mean,
        new_ci=bootstrap_ci(overlaps),
        rule=f"the mean overlap of old and new top-10 must be at least {floor:g} "
        "(CITELINE_MIGRATION_MIN_OVERLAP)",
    )
