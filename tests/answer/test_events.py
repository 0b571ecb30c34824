"""What answer events send of a passage stored word for word in other documents too."""

from __future__ import annotations

import uuid
from dataclasses import replace

from citeline.answer.events import Start, passage_dict
from citeline.answer.prompt import Passage
from citeline.retrieve.search import Copy
from tests.answer.conftest import make_hit


def test_the_evidence_and_a_cited_passage_name_the_other_documents_holding_it() -> None:
    # A copy in a web page, of which citeline keeps no original: the shells link its text instead.
    copy = Copy(
        chunk_id=901,
        document_id=uuid.UUID(int=9),
        document_name="pump-manual-2019.html",
        version=1,
        page=4,
        has_original=False,
    )
    hit = replace(make_hit(101, "Never run the pump dry."), also_in=(copy,))
    expected = [
        {
            "chunk_id": 901,
            "document_id": str(uuid.UUID(int=9)),
            "document_name": "pump-manual-2019.html",
            "version": 1,
            "page": 4,
            "has_original": False,
        }
    ]

    [given] = Start("Can it run dry?", (Passage(1, hit),), "extractive").as_dict()["passages"]

    assert given["also_in"] == expected
    assert passage_dict(Passage(1, hit))["also_in"] == expected
    assert passage_dict(Passage(2, make_hit(102, "Drain the volute.")))["also_in"] == []
