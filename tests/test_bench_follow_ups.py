"""The follow-up detection benchmark: its question sets are well formed, and only ``dev`` is ever listed."""

from __future__ import annotations

import pytest
from bench import follow_up_detection as bench

from citeline.store.analyzer import Analyzer


@pytest.mark.parametrize("name", bench.FILES)
def test_each_set_is_balanced_and_says_what_a_follow_up_needs(name: str) -> None:
    items = bench.load(name)
    assert len(items) == 120
    assert len({item["id"] for item in items}) == len(items)
    domains = {"clinical", "research", "repair", "medical-search", "team-kb"}
    assert {item["domain"] for item in items} == domains
    follow_ups = [item for item in items if item["follow_up"]]
    assert 50 <= len(follow_ups) <= 70
    assert all(item["needs"].strip() for item in follow_ups)
    assert not any(item["needs"] for item in items if not item["follow_up"])
    assert all(1 <= len(item["previous"]) <= 2 for item in items)


def test_errors_are_listed_for_the_dev_set_alone(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--errors"])
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("    ")]
    assert listed, "the detector is wrong on some dev questions, which --errors lists"
    assert all(item_id.startswith("dev-") for item_id in listed)


def test_a_follow_up_is_judged_with_the_topic_its_conversation_carried() -> None:
    item = {
        "id": "x-1",
        "domain": "repair",
        "previous": ["How do I prime the centrifugal pump?", "How often should it be serviced?"],
        "question": "And the cost?",
        "follow_up": True,
        "needs": "centrifugal pump",
    }
    result = bench.judge(item, Analyzer())
    assert result["said"] and result["correct"] and result["carried"]
    assert result["query"] == "And the cost? (serviced prime centrifugal pump)"
