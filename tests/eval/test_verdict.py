"""Whether ``citeline eval`` calls a difference real: only when its interval and its test agree, in the
table, the JSON and the HTML report alike."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from rich.console import Console

from citeline.cli import _paired_table
from citeline.eval.beir import ConfigResult, Evaluation, QueryResult
from citeline.eval.configs import Config
from citeline.eval.report import render_html
from citeline.settings import Settings

#: 36 questions: "fewer" loses 0.2 on four of them and gains 0.05 on one, so its paired interval
#: excludes 0 while the sign-flip test, seeing five queries that differ, gives p 0.12.
BASE = [0.5] * 36
FEWER = [0.5] * 31 + [0.3] * 4 + [0.55]
#: Worse by 0.2 on 30 of the 36: both agree that it is lower.
WORSE = [0.5] * 6 + [0.3] * 30


def _evaluation(settings: Settings, runs: dict[str, list[float]]) -> Evaluation:
    results = [
        ConfigResult(
            Config(name, {}, settings),
            [
                QueryResult(name, f"q{i}", f"question {i}", (), score, 0.0, 0.0, 0.0, None, 1.0, {})
                for i, score in enumerate(scores)
            ],
        )
        for name, scores in runs.items()
    ]
    return Evaluation("team", "eval-team", 36, 0, 0.1, results)


def test_a_difference_is_called_real_only_when_interval_and_test_agree(settings: Settings) -> None:
    evaluation = _evaluation(settings, {"default": BASE, "fewer": FEWER, "worse": WORSE})
    configs = evaluation.summary()["configs"]
    # The fields issue 12 names stay as they were; the verdict is a field of its own.
    fewer, worse = configs["fewer"], configs["worse"]
    assert fewer["delta_vs_first_ci"][1] < 0 and fewer["p_vs_first"] > 0.05
    assert fewer["verdict_vs_first"] == "disagree" and fewer["differing_vs_first"] == 5
    assert worse["verdict_vs_first"] == "lower" and worse["differing_vs_first"] == 30
    assert configs["default"]["verdict_vs_first"] is None

    # Printed where a script's log or a pipe gives rich 80 columns: nothing may be cut short.
    table = io.StringIO()
    Console(file=table, width=80).print(_paired_table(evaluation.summary()))
    assert "…" not in table.getvalue()
    lines = table.getvalue().splitlines()
    row = next(line for line in lines if "fewer" in line)
    assert "disagree †" in row and "-0.0431 to -0.0028" in row
    assert "lower" in next(line for line in lines if "worse" in line)
    assert "† interval and test disagree: too few queries differ to tell" in table.getvalue()

    page = ET.fromstring(render_html(evaluation).removeprefix("<!DOCTYPE html>\n"))
    rows = {r[0].text: [c.text for c in r] for r in page.findall(".//table[@id='metrics']/tbody/tr")}
    assert rows["fewer"][5] == "-0.0431 to -0.0028" and rows["fewer"][7] == "disagree †"
    assert rows["worse"][7] == "lower" and rows["default"][7] is None
    note = " ".join("".join(page.find(".//p[@id='verdicts']").itertext()).split())  # type: ignore[union-attr]
    assert "only when its interval excludes 0 and p is below 0.05" in note
    assert "† interval and test disagree: too few queries differ to tell" in note
