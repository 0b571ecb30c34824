"""Loading chunks embedded elsewhere (``Citeline.load_prepared``): stored as ingest stores them, searchable
at once by both keyword indexes, replaced and deleted like any version; and vectors of more than 2,000
dimensions indexed as halfvec."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.engine import Citeline
from citeline.errors import ConfigError, InvalidRequestError, StoreError
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.store.bulk import PreparedChunk, PreparedDocument
from citeline.store.catalog import Labels
from citeline.store.index import VectorQuery
from citeline.store.keyword import MemoryKeywordIndex, SqlKeywordIndex
from citeline.store.vectors import index_name, index_type
from tests.conftest import SHARED

TEXTS = {
    "statins": ["Statins lower LDL cholesterol in familial hypercholesterolaemia.", "Myopathy is rare."],
    "aspirin": ["Aspirin lowers the risk of a second myocardial infarction.", "It also thins the blood."],
    "sleep": ["Short sleep raises blood pressure and insulin resistance.", "Naps do not make up for it."],
}


def _document(cl: Citeline, name: str, texts: list[str], scopes: tuple[str, ...] = ()) -> PreparedDocument:
    chunks, at = [], 0
    for text in texts:
        chunks.append(PreparedChunk(text, start=at))
        at += len(text) + 1
    return PreparedDocument(
        f"prepared://{name}", name, chunks, cl.embedder.embed(texts), labels=Labels(scopes=scopes)
    )


def _keyword_hits(cl: Citeline, index: MemoryKeywordIndex | SqlKeywordIndex, query: str) -> list[int]:
    where, params = Filters().sql()
    with cl.engine.connect() as conn:
        found = index.search(
            conn, cl.analyzer.term_counts(query), where=where, params=params, document_ids=None, limit=10
        )
    return [chunk for chunk, _ in found]


def _chunk_texts(cl: Citeline, chunk_ids: list[int]) -> list[str]:
    with cl.engine.connect() as conn:
        rows: dict[int, str] = dict(
            conn.execute(
                sa.text("SELECT id, text FROM chunks WHERE id = ANY(:ids)"), {"ids": chunk_ids}
            ).all()
        )
    return [rows[c] for c in chunk_ids]


def test_prepared_documents_are_searchable_like_ingested_ones(cl: Citeline) -> None:
    loaded = cl.load_prepared([_document(cl, name, texts) for name, texts in TEXTS.items()])

    assert [d.name for d in loaded] == list(TEXTS)
    assert all(d.is_active and d.vector_count == 2 for d in loaded)
    hits = cl.search(SearchRequest("does aspirin prevent another heart attack?", top_k=2))
    assert hits[0].document_name == "aspirin"
    assert hits[0].text == TEXTS["aspirin"][0]
    assert cl.stats()["chunks"] == 6


def test_scopes_of_prepared_documents_filter_search(cl: Citeline) -> None:
    cl.load_prepared(
        [
            _document(cl, "statins", TEXTS["statins"], scopes=("cardio",)),
            _document(cl, "sleep", TEXTS["sleep"], scopes=("sleep-clinic",)),
            _document(cl, "aspirin", TEXTS["aspirin"]),
        ]
    )

    hits = cl.search(SearchRequest("blood pressure", filters=Filters(scopes=("cardio",)), top_k=10))

    assert {h.document_name for h in hits} == {"statins", "aspirin"}


def test_memory_keyword_index_follows_a_version_swap_and_a_delete(cl: Citeline) -> None:
    memory, sql = MemoryKeywordIndex(), SqlKeywordIndex()
    cl.load_prepared([_document(cl, name, texts) for name, texts in TEXTS.items()])
    assert _chunk_texts(cl, _keyword_hits(cl, memory, "aspirin")) == [TEXTS["aspirin"][0]]

    # A new version of the same source replaces the old one's postings.
    new = ["Clopidogrel replaces aspirin after a stent.", "Ticagrelor is an alternative."]
    [swapped] = cl.load_prepared([_document(cl, "aspirin", new)])
    assert swapped.version == 2
    assert _chunk_texts(cl, _keyword_hits(cl, memory, "aspirin")) == [new[0]]
    assert _keyword_hits(cl, memory, "infarction") == []
    assert _keyword_hits(cl, memory, "ticagrelor") == _keyword_hits(cl, sql, "ticagrelor") != []

    cl.delete(str(swapped.id))
    assert _keyword_hits(cl, memory, "aspirin") == _keyword_hits(cl, sql, "aspirin") == []
    for query in ("blood pressure", "statins ldl", "naps"):
        assert _keyword_hits(cl, memory, query) == _keyword_hits(cl, sql, query) != []


def test_unchanged_documents_are_left_as_they_are(cl: Citeline) -> None:
    doc = _document(cl, "sleep", TEXTS["sleep"])
    [first] = cl.load_prepared([doc])

    assert cl.load_prepared([doc]) == []
    assert [v.version for v in cl.versions(str(first.id))] == [1]


def test_vectors_must_match_the_chunks(cl: Citeline) -> None:
    doc = _document(cl, "sleep", TEXTS["sleep"])
    short = PreparedDocument(doc.source_uri, doc.name, doc.chunks, doc.vectors[:1])
    with pytest.raises(ConfigError, match="2 chunks need as many vectors"):
        cl.load_prepared([short])
    other = _document(cl, "statins", TEXTS["statins"])
    wide = PreparedDocument(other.source_uri, other.name, other.chunks, np.hstack([other.vectors] * 2))
    with pytest.raises(ConfigError, match="one dimension"):
        cl.load_prepared([doc, wide])


def test_index_type_by_dimension() -> None:
    assert index_type(384) == "vector"
    assert index_type(2000) == "vector"
    assert index_type(2001) == "halfvec"
    assert index_type(4000) == "halfvec"
    with pytest.raises(StoreError, match="at most 4000 dimensions"):
        index_type(4001)


# -- more than 2,000 dimensions ------------------------------------------------------------------------

WIDE_MODEL = "onnx:all-MiniLM-L6-v2-sentences-x8"


def _sentence_vectors(cl: Citeline, abstracts: list[str]) -> NDArray[np.float32]:
    """3,072-dimensional vectors of real text: each abstract's first 8 sentences embedded by the packaged
    model (384 dimensions each, cycled when fewer), concatenated and normalised."""
    views = []
    for abstract in abstracts:
        sentences = [s for s in abstract.split(". ") if s.strip()]
        views += [sentences[i % len(sentences)] for i in range(8)]
    vectors = cl.embedder.embed(views).reshape(len(abstracts), 8 * cl.embedder.dimension)
    out: NDArray[np.float32] = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    return out


def test_vectors_of_3072_dimensions_are_indexed_as_halfvec_and_found_exactly(cl: Citeline) -> None:
    with (SHARED / "eval" / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
        abstracts = [item["text"] for item in map(json.loads, fh) if item["text"].count(". ") >= 3][:86]
    vectors = _sentence_vectors(cl, abstracts)
    assert vectors.shape == (86, 3072)
    stored, queries = vectors[:80], vectors[80:]
    documents = [
        PreparedDocument(f"prepared://wide/{i}", f"wide-{i}", [PreparedChunk(text)], stored[i : i + 1])
        for i, text in enumerate(abstracts[:80])
    ]

    loaded = cl.load_prepared(documents, model=WIDE_MODEL)

    assert len(loaded) == 80
    with cl.engine.connect() as conn:
        definition = conn.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": index_name(WIDE_MODEL)}
        ).scalar_one()
        assert "halfvec(3072)" in definition and "halfvec_cosine_ops" in definition
        by_name: dict[str, int] = dict(
            conn.execute(
                sa.text("SELECT d.name, c.id FROM chunks c JOIN documents d ON d.id = c.document_id")
            ).all()
        )
        # 80 rows are cheaper to sort than to walk a graph for: make the planner take the HNSW index.
        conn.execute(sa.text("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = off"))
        plan = conn.execute(
            sa.text(
                f"EXPLAIN SELECT id FROM chunks WHERE embedding_model = '{WIDE_MODEL}' "
                "ORDER BY embedding::halfvec(3072) <=> CAST(:q AS halfvec(3072)) LIMIT 10"
            ),
            {"q": "[" + ",".join(map(str, queries[0].tolist())) + "]"},
        ).scalars()
        assert f"Index Scan using {index_name(WIDE_MODEL)}" in " ".join(plan)
        for query in queries:
            found = cl.vector_index.search(conn, VectorQuery(query, WIDE_MODEL, Filters(), None, 10))
            exact = np.argsort(-(stored @ query), kind="stable")[:10]
            assert [c for c, _ in found] == [by_name[f"wide-{i}"] for i in exact]
            # Distances are the halfvec index's: within 16-bit rounding of the exact ones.
            assert np.allclose([d for _, d in found], 1 - stored[exact] @ query, atol=2e-3)


def test_a_nul_or_lone_surrogate_in_a_prepared_text_is_replaced_as_ingest_replaces_it(cl: Citeline) -> None:
    # Text to index is cleaned, not refused, whichever way it comes: ingest of a caller's in-memory text
    # replaces each NUL and lone surrogate by U+FFFD, one for one, and so does a load of prepared chunks
    # (a NUL was refused here, a lone surrogate replaced). UTF-8 cannot hold a surrogate and PostgreSQL
    # no NUL: either failed the COPY of every document in the load.
    texts = ["Statins lower \udcff LDL \x00cholesterol.", "Myopathy is rare \ud800 on statins."]
    replaced = [
        t.replace("\udcff", "\ufffd").replace("\ud800", "\ufffd").replace("\x00", "\ufffd") for t in texts
    ]
    chunks = [
        PreparedChunk(texts[0], section="Lipids\x00"),
        PreparedChunk(texts[1], start=len(texts[0]) + 1, section="Harms \udcff"),
    ]
    odd = PreparedDocument(
        "prepared://odd", "odd", chunks, cl.embedder.embed(replaced), title="Statins\x00 \ud800 review"
    )
    good = _document(cl, "aspirin", TEXTS["aspirin"])
    [stored_odd, _] = cl.load_prepared([odd, good])
    assert stored_odd.title == "Statins\ufffd \ufffd review"
    with cl.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT text, start_offset, section FROM chunks ORDER BY id")).all()
    assert [tuple(r) for r in rows[:2]] == [
        (replaced[0], 0, "Lipids\ufffd"),
        (replaced[1], len(texts[0]) + 1, "Harms \ufffd"),
    ]


def test_labels_of_a_prepared_document_are_refused_not_cleaned(cl: Citeline) -> None:
    # Labels are the caller's own words, refused as ingest refuses them, naming the field.
    for bad, message in (("\x00", "NUL"), ("\ud800", "lone surrogate")):
        doc = _document(cl, "aspirin", TEXTS["aspirin"])
        tagged = PreparedDocument(
            doc.source_uri, doc.name, doc.chunks, doc.vectors, labels=Labels(tags=("ok", f"cardio{bad}"))
        )
        with pytest.raises(InvalidRequestError, match=rf"documents\[0\]\.labels\.tags\[1\]: .*{message}"):
            cl.load_prepared([tagged])
    assert cl.stats()["chunks"] == 0


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (Labels(tags=("t" * 300,)), "documents[1].labels.tags: a tag must be at most 256 characters"),
        (Labels(scopes=(" ",)), "documents[1].labels.scopes: a scope must not be empty or blank"),
        (
            Labels(metadata={"site": 7}),
            "documents[1].labels.metadata.site: a metadata value must be a string",
        ),
    ],
    ids=["long tag", "blank scope", "metadata number"],
)
def test_labels_of_prepared_documents_are_checked_as_ingest_checks_them(
    cl: Citeline, labels: Labels, message: str
) -> None:
    # They were stored as given: a tag longer than ingest allows (one of 8 KB overflows the labels'
    # index, failing the whole load as a database error), a blank scope no key holds, a number as
    # metadata that no filter matches. IngestOptions refuses each, naming the field; so does a load.
    good = _document(cl, "aspirin", TEXTS["aspirin"])
    doc = _document(cl, "sleep", TEXTS["sleep"])
    bad = PreparedDocument(doc.source_uri, doc.name, doc.chunks, doc.vectors, labels=labels)
    with pytest.raises(InvalidRequestError) as refused:
        cl.load_prepared([good, bad])
    assert str(refused.value).startswith(message)
    assert cl.stats()["chunks"] == 0
