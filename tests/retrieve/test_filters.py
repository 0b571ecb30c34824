"""Filters are part of the index queries: scope rules, and top-k never hiding or leaking anything."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from citeline.access import Access
from citeline.engine import Citeline
from citeline.errors import ConfigError, InvalidRequestError, ModelMismatchError, NotFoundError
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Fusion, Settings
from tests.conftest import write

QUERY = "insulin dose adjustment for type 2 diabetes"


@pytest.fixture
def corpus(cl: Citeline, tmp_path: Path) -> Citeline:
    """Thirty near-copies of the answer scoped ``cardiology``, a weaker one in ``diabetes``, a universal."""
    noisy = [
        write(tmp_path / f"cardio-{i:02}.txt", f"Insulin dose adjustment for type 2 diabetes, note {i}.")
        for i in range(30)
    ]
    cl.ingest(noisy, IngestOptions(scopes=("cardiology",), category="Clinical/Cardiology", tags=("noise",)))
    cl.ingest(
        [
            write(
                tmp_path / "diabetes.txt",
                "Titrate basal insulin by two units every three days until fasting glucose is in range.",
            )
        ],
        IngestOptions(
            scopes=("diabetes",),
            category="Clinical/Endocrine",
            tags=("insulin", "protocol"),
            metadata={"lang": "en"},
        ),
    )
    cl.ingest(
        [write(tmp_path / "universal.md", "# Hand hygiene\n\nWash hands before handling insulin pens.")],
        IngestOptions(category="Clinical", tags=("insulin",), metadata={"lang": "fr"}),
    )
    return cl


def _names(cl: Citeline, **kwargs: object) -> list[str]:
    request = SearchRequest(QUERY, **kwargs)  # type: ignore[arg-type]
    return [h.document_name for h in cl.search(request)]


def test_unfiltered_search_sees_everything(corpus: Citeline) -> None:
    names = _names(corpus, top_k=50)
    assert len(names) == 32 and "diabetes.txt" in names and "universal.md" in names


@pytest.mark.parametrize("exact_below", [0, 1_000_000], ids=["hnsw-iterative", "exact-scan"])
def test_top_k_never_hides_an_in_scope_hit(corpus: Citeline, exact_below: int) -> None:
    with corpus.derive(exact_search_below=exact_below) as configured:
        names = _names(configured, filters=Filters(scopes=("diabetes",)), top_k=2)
    assert sorted(names) == ["diabetes.txt", "universal.md"]


def test_universal_documents_are_found_from_every_scope(corpus: Citeline) -> None:
    for scope in ("cardiology", "diabetes", "a-scope-nobody-has"):
        assert "universal.md" in _names(corpus, filters=Filters(scopes=(scope,)), top_k=50)
    assert _names(corpus, filters=Filters(scopes=("a-scope-nobody-has",)), top_k=50) == ["universal.md"]


def test_scoped_documents_stay_in_their_scope(corpus: Citeline) -> None:
    names = _names(corpus, filters=Filters(scopes=("cardiology",)), top_k=50)
    assert "diabetes.txt" not in names and len(names) == 31


def test_category_matches_itself_and_below(corpus: Citeline) -> None:
    assert _names(corpus, filters=Filters(category="Clinical/Endocrine")) == ["diabetes.txt"]
    assert len(_names(corpus, filters=Filters(category="Clinical"), top_k=50)) == 32
    assert _names(corpus, filters=Filters(category="Clin")) == []


def test_tags_any_all_metadata_type_and_ids(corpus: Citeline) -> None:
    assert sorted(_names(corpus, filters=Filters(tags_any=("insulin",)))) == ["diabetes.txt", "universal.md"]
    assert _names(corpus, filters=Filters(tags_all=("insulin", "protocol"))) == ["diabetes.txt"]
    assert _names(corpus, filters=Filters(metadata={"lang": "fr"})) == ["universal.md"]
    assert _names(corpus, filters=Filters(content_types=("text/markdown",))) == ["universal.md"]
    assert _names(corpus, filters=Filters(content_types=("markdown",))) == ["universal.md"]
    doc = next(d for d in corpus.documents() if d.name == "diabetes.txt")
    assert _names(corpus, filters=Filters(document_ids=(doc.id,))) == ["diabetes.txt"]


def test_a_document_filter_takes_whole_ids_and_the_unique_prefixes_paths_take(corpus: Citeline) -> None:
    docs = corpus.documents()
    doc = next(d for d in docs if d.name == "diabetes.txt")
    prefix = str(doc.id)[:8]
    assert corpus.document_ids([prefix, str(doc.id)]) == (doc.id,)
    assert _names(corpus, filters=Filters(document_ids=corpus.document_ids([prefix]))) == ["diabetes.txt"]
    # A whole id is taken as given, without reading the catalog: one that names nothing finds nothing.
    nothing = uuid.UUID(int=0)
    assert corpus.document_ids([str(nothing)]) == (nothing,)
    # A prefix is resolved as Citeline.document resolves one: to one document the grant sees.
    with pytest.raises(NotFoundError, match=f"no document with id '{prefix}'"):
        corpus.document_ids([prefix], access=Access.reader(["cardiology"]))
    shared = Counter(str(d.id)[0] for d in docs).most_common(1)[0][0]  # 32 documents, 16 first digits
    with pytest.raises(InvalidRequestError, match=f"id prefix '{shared}' matches [0-9]+ documents"):
        corpus.document_ids([shared])
    with pytest.raises(InvalidRequestError, match=r"a document id \(or the start of one\) is needed"):
        corpus.document_ids([""])


def test_distance_threshold_drops_far_hits(corpus: Citeline) -> None:
    near = corpus.search(SearchRequest(QUERY, top_k=50, distance_threshold=0.3))
    assert near and all(h.distance <= 0.3 for h in near)
    assert len(near) < 32


def test_weighted_fusion_ranks_by_the_weighted_sum(corpus: Citeline) -> None:
    hits = corpus.search(SearchRequest(QUERY, top_k=5, fusion=Fusion.WEIGHTED))
    assert [h.fused_score for h in hits] == sorted((h.fused_score for h in hits), reverse=True)
    assert hits[0].document_name.startswith("cardio-")


def test_bad_requests_say_what_is_wrong(corpus: Citeline) -> None:
    with pytest.raises(InvalidRequestError, match="empty"):
        corpus.search("   ")
    with pytest.raises(InvalidRequestError, match=r"\[0, 2\]"):
        corpus.search(SearchRequest(QUERY, distance_threshold=3.0))


def test_search_refuses_to_mix_embedding_models(corpus: Citeline) -> None:
    import sqlalchemy as sa

    with corpus.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE documents SET embedding_model = 'onnx:another-model' WHERE name = 'universal.md'")
        )
    with pytest.raises(ModelMismatchError, match="another-model"):
        corpus.search(QUERY)
    # A search that cannot reach the other model's documents is fine.
    assert _names(corpus, filters=Filters(scopes=("diabetes",), category="Clinical/Endocrine")) == [
        "diabetes.txt"
    ]


def test_settings_reject_bad_namespaces(data_dir: Path) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        Settings(data_dir=data_dir, namespace="Robert'); DROP TABLE")


def test_content_types_take_the_short_names_docs_list_shows_and_refuse_unknown_ones() -> None:
    # Stored content types are MIME types; `docs list` shows them short (pdf, csv, text). Either finds
    # the same documents, and a type no document can have is refused, not an empty result.
    short = Filters(content_types=("csv", "pdf", "text", "markdown", "html", "Text/CSV"))
    assert short.content_types == ("text/csv", "application/pdf", "text/plain", "text/markdown", "text/html")
    assert Filters(content_types=("application/pdf",)).content_types == ("application/pdf",)
    with pytest.raises(InvalidRequestError, match="unknown content type 'docx'") as refused:
        Filters(content_types=("docx",))
    for known in ("pdf", "text/csv", "application/pdf"):
        assert known in str(refused.value)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"scopes": "guide"}, "scopes: give a list of scopes, not the string 'guide'"),
        ({"tags_any": "pdf"}, "tags_any: give a list of tags, not the string 'pdf'"),
        ({"tags_all": "pdf"}, "tags_all: give a list of tags, not the string 'pdf'"),
        ({"content_types": "pdf"}, "content_types: give a list of content types, not the string 'pdf'"),
        ({"model_numbers": "XR-200"}, "model_numbers: give a list of model numbers, not the string"),
        ({"section_types": "table"}, "section_types: give a list of section types, not the string"),
        ({"document_ids": "1f0c"}, "document_ids: give a list of document ids, not '1f0c'"),
        ({"document_ids": ("1f0c",)}, "document_ids: a document id must be a uuid.UUID, got '1f0c'"),
        ({"metadata": "site=a"}, "metadata: give a mapping of names to strings"),
        ({"category": ("a",)}, "category: give a string, not ('a',)"),
    ],
)
def test_filters_of_the_wrong_type_are_refused_naming_the_field(given: dict[str, Any], message: str) -> None:
    # scopes="guide" filtered by the scopes g, u, i, d and e; tags_any="pdf" raised a bare TypeError.
    with pytest.raises(InvalidRequestError, match=f"^{re.escape(message)}"):
        Filters(**given)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"top_k": "5"}, "top_k: give a whole number, not '5'"),
        ({"candidates": 2.0}, "candidates: give a whole number, not 2.0"),
        ({"distance_threshold": "0.5"}, "distance_threshold: give a number, not '0.5'"),
        ({"mmr_lambda": "high"}, "mmr_lambda: give a number, not 'high'"),
        ({"filters": {"scopes": ["a"]}}, "filters: give a Filters, not {'scopes': ['a']}"),
        ({"rerank": 1}, "rerank: give a string, not 1"),
    ],
)
def test_a_search_request_of_the_wrong_type_is_refused_naming_the_field(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=f"^{re.escape(message)}"):
        SearchRequest("pump", **given)
    with pytest.raises(InvalidRequestError, match=r"^query: give a string, not 5"):
        SearchRequest(5)  # type: ignore[arg-type]


def test_a_search_request_takes_numbers_of_either_kind_where_a_fraction_is_meant() -> None:
    request = SearchRequest("pump", top_k=5, distance_threshold=1, mmr_lambda=0)
    assert (request.top_k, request.distance_threshold, request.mmr_lambda) == (5, 1, 0)
