"""Reading BEIR folders: a corpus file that names another folder's corpus is followed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.eval.beir import corpus_sources, evaluate, load_beir
from tests.eval.conftest import QUERIES


def test_a_corpus_stored_as_a_link_in_text_is_followed(beir_folder: Path, tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    shutil.copytree(beir_folder, claims)
    (claims / "corpus.jsonl").write_text(f"../{beir_folder.name}/corpus.jsonl\n", encoding="utf-8")
    assert beir_folder.parent == claims.parent
    data = load_beir(claims)
    assert data.corpus_path == (beir_folder / "corpus.jsonl").resolve()
    assert len(list(corpus_sources(data, "ns"))) == len(list(corpus_sources(load_beir(beir_folder), "ns")))
    assert set(data.queries) == set(QUERIES)


def test_a_link_to_nothing_names_the_missing_corpus(beir_folder: Path) -> None:
    (beir_folder / "corpus.jsonl").write_text("../nowhere/corpus.jsonl", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match="nowhere"):
        load_beir(beir_folder)


@pytest.mark.parametrize("limit", [0, -3])
def test_a_limit_below_one_query_is_refused_before_the_corpus_is_touched(
    cl: Citeline, beir_folder: Path, limit: int
) -> None:
    with pytest.raises(InvalidRequestError, match=f"at least 1; got {limit}"):
        evaluate(cl, load_beir(beir_folder), limit=limit)
    assert cl.documents() == []
