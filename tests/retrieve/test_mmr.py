"""MMR: a relevant ranking that stops repeating itself, by the chunks' own vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.retrieve.mmr import mmr
from citeline.retrieve.search import SearchRequest, Timings
from tests.conftest import write

QUERY = "priming the pump"
PRIME = "Prime the centrifugal pump by filling its casing with water before starting it."
# The same instruction reworded: a near-duplicate of PRIME (cosine 0.96 with the packaged model).
PRIME_AGAIN = "Before starting it, prime the centrifugal pump by filling the casing with water."
VENT = "Open the vent plug while priming the pump until no air comes out."
# Unrelated: the weak tail every real candidate pool has, which relevance scaling measures against.
MUSEUM = "The museum opens at nine on Sundays."


@pytest.fixture
def vectors(cl: Citeline) -> NDArray[np.float32]:
    return cl.embedder.embed([PRIME, PRIME_AGAIN, VENT, MUSEUM])


def test_lambda_one_keeps_the_ranking(vectors: NDArray[np.float32]) -> None:
    assert mmr([1.0, 0.9, 0.6, 0.0], vectors, k=4, lambda_=1.0) == [0, 1, 2, 3]
    assert mmr([0.6, 0.9, 0.9, 0.0], vectors, k=4, lambda_=1.0) == [1, 2, 0, 3]


def test_a_near_duplicate_gives_way_to_a_different_passage(vectors: NDArray[np.float32]) -> None:
    assert mmr([1.0, 0.95, 0.8, 0.0], vectors, k=3, lambda_=0.5) == [0, 2, 1]
    # Relevance still counts: a passage about nothing relevant is not picked for being different.
    assert 3 not in mmr([1.0, 0.95, 0.8, 0.0], vectors, k=3, lambda_=0.5)


def test_lambda_zero_picks_the_most_relevant_first_then_only_the_least_alike(
    vectors: NDArray[np.float32],
) -> None:
    assert mmr([0.95, 1.0, 0.8, 0.0], vectors, k=2, lambda_=0.0) == [1, 3]


def test_relevance_is_compared_on_its_own_scale(vectors: NDArray[np.float32]) -> None:
    # Logits, BM25 or fused scores: only their order and spacing matter, not their unit.
    assert mmr([10.0, 9.5, 8.0, 0.0], vectors, k=4, lambda_=0.5) == [0, 2, 1, 3]
    assert mmr([3.0, 2.95, 2.8, 2.0], vectors, k=4, lambda_=0.5) == [0, 2, 1, 3]


def test_k_is_capped_and_lambda_checked(vectors: NDArray[np.float32]) -> None:
    assert len(mmr([1.0, 0.9, 0.6, 0.0], vectors, k=10, lambda_=0.5)) == 4
    assert mmr([1.0, 0.9, 0.6, 0.0], vectors, k=0, lambda_=0.5) == []
    with pytest.raises(InvalidRequestError, match=r"mmr_lambda must be in \[0, 1\]"):
        mmr([1.0, 0.9, 0.6, 0.0], vectors, k=2, lambda_=1.5)


@pytest.fixture
def pump_docs(cl: Citeline, tmp_path: Path) -> Citeline:
    cl.ingest(
        [
            write(tmp_path / "prime.txt", PRIME),
            write(tmp_path / "prime-again.txt", PRIME_AGAIN),
            write(tmp_path / "vent.txt", VENT),
            write(tmp_path / "museum.txt", MUSEUM),
        ]
    )
    return cl


def test_search_with_mmr_fills_top_k_with_different_passages(pump_docs: Citeline) -> None:
    plain = pump_docs.search(SearchRequest(QUERY, top_k=2, rerank="none"))
    assert {h.document_name for h in plain} == {"prime.txt", "prime-again.txt"}

    timings = Timings()
    diverse = pump_docs.search(SearchRequest(QUERY, top_k=2, rerank="none", mmr_lambda=0.5), timings=timings)

    assert [h.document_name for h in diverse] == [plain[0].document_name, "vent.txt"]
    assert timings.rerank > 0


def test_mmr_follows_the_reranker_and_the_setting(pump_docs: Citeline) -> None:
    with pump_docs.derive(mmr_lambda=0.5, reranker="prf") as configured:
        hits = configured.search(SearchRequest(QUERY, top_k=2))
        unchanged = configured.search(SearchRequest(QUERY, top_k=2, mmr_lambda=1.0))
    assert "vent.txt" in {h.document_name for h in hits}
    assert {h.document_name for h in unchanged} == {"prime.txt", "prime-again.txt"}


def test_an_out_of_range_lambda_is_a_bad_request(pump_docs: Citeline) -> None:
    with pytest.raises(InvalidRequestError, match="mmr_lambda"):
        pump_docs.search(SearchRequest(QUERY, mmr_lambda=-0.1))
