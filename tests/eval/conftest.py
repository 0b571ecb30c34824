"""A tiny real BEIR folder: six short documents, four queries with judgements.

Query q3 is the one where the two retrievers disagree: "lift" and "ground" pull BM25 to the hotel
lift, while the meaning (how planes take off) belongs to the aerodynamics entry, which shares no
word with the query.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write

CORPUS = [
    (
        "aspirin",
        "Aspirin",
        "Low-dose aspirin lowers the risk of a second heart attack in adults with coronary disease.",
    ),
    ("statins", "Statins", "Statins lower LDL cholesterol and reduce the number of cardiovascular events."),
    (
        "elevator",
        "Hotel lift",
        "The lift in the hotel lobby carries guests from the ground floor up to the roof terrace.",
    ),
    (
        "wings",
        "Aerodynamics",
        "Air flowing faster over the curved upper surface of a wing pushes an aeroplane upward, "
        "so it can take off.",
    ),
    ("vitd", "Vitamin D", "Vitamin D supplements do not prevent fractures in older people living at home."),
    ("sleep", "Sleep", "Adults who sleep less than six hours a night are more likely to become obese."),
]
QUERIES = {
    "q1": "Do statins reduce cholesterol?",
    "q2": "Aspirin prevents heart attacks.",
    "q3": "How does a plane get lift off the ground?",
    "q4": "Short sleep and weight gain",
}
QRELS = {"q1": "statins", "q2": "aspirin", "q3": "wings", "q4": "sleep"}


def write_beir(
    folder: Path,
    queries: dict[str, str],
    qrels: dict[str, str],
    corpus: list[tuple[str, str, str]] = CORPUS,
) -> Path:
    """A BEIR folder: ``corpus`` as (id, title, text), ``queries`` by id, one judged document per query."""
    write(
        folder / "corpus.jsonl",
        "\n".join(json.dumps({"_id": i, "title": t, "text": x}) for i, t, x in corpus),
    )
    write(folder / "queries.jsonl", "\n".join(json.dumps({"_id": q, "text": t}) for q, t in queries.items()))
    write(
        folder / "qrels" / "test.tsv",
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in qrels.items()),
    )
    return folder


@pytest.fixture
def beir_folder(tmp_path: Path) -> Path:
    # Characters that must be escaped in HTML, in the folder name the report shows as the data set.
    return write_beir(tmp_path / "mini & <beir>", QUERIES, QRELS)
