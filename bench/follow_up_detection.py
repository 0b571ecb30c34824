"""Which chat questions lean on the conversation: is_follow_up and the heuristic rewrite, measured
(``python -m bench.follow_up_detection``).

A conversation's turn 2 is searched as asked when :func:`citeline.chat.rewrite.is_follow_up` says it
stands alone, and with the earlier topic added when it says it does not. Both mistakes cost: a
follow-up taken as standalone searches for "it" ("What torque does it need?"), a standalone question
taken as a follow-up is searched with another topic's words beside its own.

The questions are in ``bench/followups/``: ``dev.jsonl`` and ``test.jsonl``, 120 items each, written by
two writers who never saw the detector or its tests, for the five kinds of deployment citeline
replaces (clinical guidelines, research literature, repair manuals, drug reference, a team's
knowledge base). Each item holds one or two earlier questions, the new one, its label (``follow_up``:
a search for the question alone would miss its topic) and, for a follow-up, the earlier words a search
needs (``needs``). Changes to the detector are made looking at ``dev`` only. ``test`` and ``heldout``
say whether they hold on questions the change was not fitted to (``heldout`` was written after the
first change, and its items have never been listed).

Reported per file: accuracy with its 95% bootstrap interval, follow-ups caught, standalone questions
left alone, and topic carried: of the follow-ups, how many get a query holding every word of
``needs`` (stemmed, as the keyword index sees them) from the heuristic rewrite, which answers without
a model and is what a model's rewrite falls back to. ``--errors`` lists the items of ``dev`` the
detector gets wrong (the other sets are scored, never listed, so that nobody fits the detector to
them); ``--out`` writes each item's result, and ``--pair OLD NEW`` compares two such files item by
item (a paired randomisation test on correctness), each set alone and the unfitted ones together.

    .venv/bin/python -m bench.follow_up_detection [--errors] [--out new.json]
    .venv/bin/python -m bench.follow_up_detection --pair old.json new.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from citeline.chat.rewrite import heuristic_rewrite, is_follow_up
from citeline.eval.stats import bootstrap_ci, paired_comparison
from citeline.store.analyzer import Analyzer

SETS = Path(__file__).parent / "followups"
FILES = ("dev", "test", "heldout")


def load(name: str) -> list[dict[str, Any]]:
    """The items of ``bench/followups/<name>.jsonl``, checked for the fields this script reads."""
    items = []
    path = SETS / f"{name}.jsonl"
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        missing = {"id", "domain", "previous", "question", "follow_up", "needs"} - item.keys()
        if missing:
            raise SystemExit(f"{path}:{number}: missing {', '.join(sorted(missing))}")
        items.append(item)
    return items


def judge(item: dict[str, Any], analyzer: Analyzer) -> dict[str, Any]:
    """One item's outcome: what the detector said, and the query the heuristic rewrite gives."""
    # Each earlier question is rewritten as the conversation rewrote it, so a topic carried through an
    # earlier follow-up is there to borrow.
    queries: list[str] = []
    for previous in item["previous"]:
        queries.append(heuristic_rewrite(previous, queries))
    said = is_follow_up(item["question"])
    query = heuristic_rewrite(item["question"], queries)
    needed = set(analyzer.terms(item["needs"]))
    return {
        "id": item["id"],
        "domain": item["domain"],
        "question": item["question"],
        "follow_up": bool(item["follow_up"]),
        "said": said,
        "correct": said == bool(item["follow_up"]),
        "query": query,
        # Of a gold follow-up: whether the searched query holds every word the topic needs.
        "carried": bool(item["follow_up"]) and bool(needed) and needed <= set(analyzer.terms(query)),
    }


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.0%})" if total else "0/0"


def report(name: str, results: list[dict[str, Any]], *, errors: bool) -> dict[str, Any]:
    correct = [1.0 if r["correct"] else 0.0 for r in results]
    follow = [r for r in results if r["follow_up"]]
    alone = [r for r in results if not r["follow_up"]]
    low, high = bootstrap_ci(correct)
    summary = {
        "items": len(results),
        "accuracy": sum(correct) / len(correct),
        "accuracy_ci": [low, high],
        "follow_ups_caught": sum(r["said"] for r in follow),
        "follow_ups": len(follow),
        "standalone_kept": sum(not r["said"] for r in alone),
        "standalone": len(alone),
        "topic_carried": sum(r["carried"] for r in follow),
    }
    print(f"{name}: {len(results)} questions")
    print(f"  accuracy            {summary['accuracy']:.3f} (95% {low:.3f} to {high:.3f})")
    print(f"  follow-ups caught   {_share(summary['follow_ups_caught'], len(follow))}")
    print(f"  standalone kept     {_share(summary['standalone_kept'], len(alone))}")
    print(f"  topic carried       {_share(summary['topic_carried'], len(follow))}")
    if errors and name == "dev":
        for r in results:
            if not r["correct"]:
                kind = "missed follow-up" if r["follow_up"] else "taken as follow-up"
                print(f"    {r['id']} [{kind}] {r['question']!r}")
    return summary


def pair(old_path: Path, new_path: Path) -> None:
    old, new = (json.loads(p.read_text(encoding="utf-8")) for p in (old_path, new_path))
    names = [name for name in FILES if name in old and name in new]
    groups = {name: [name] for name in names}
    # The sets the detector was not fitted to, together: twice the questions, a narrower interval.
    unseen = [name for name in names if name != "dev"]
    if len(unseen) > 1:
        groups[" + ".join(unseen)] = unseen
    for label, members in groups.items():
        before = {r["id"]: r for name in members for r in old[name]["items"]}
        after = {r["id"]: r for name in members for r in new[name]["items"]}
        ids = sorted(before.keys() & after.keys())
        a = [1.0 if before[i]["correct"] else 0.0 for i in ids]
        b = [1.0 if after[i]["correct"] else 0.0 for i in ids]
        comparison = paired_comparison(a, b)
        fixed = sum(1 for x, y in zip(a, b, strict=True) if y > x)
        broken = sum(1 for x, y in zip(a, b, strict=True) if y < x)
        low, high = comparison.delta_ci
        print(
            f"{label}: accuracy {sum(a) / len(a):.3f} -> {sum(b) / len(b):.3f}, "
            f"Δ {comparison.delta:+.3f} (95% {low:+.3f} to {high:+.3f}), p {comparison.p_value:.3f}; "
            f"{fixed} fixed, {broken} broken"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--errors", action="store_true", help="List the dev items the detector gets wrong.")
    parser.add_argument("--out", type=Path, help="Write each item's result here, for --pair.")
    parser.add_argument("--pair", nargs=2, type=Path, metavar=("OLD", "NEW"), help="Compare two --out files.")
    args = parser.parse_args(argv)
    if args.pair:
        pair(*args.pair)
        return
    analyzer = Analyzer()
    written: dict[str, Any] = {}
    for name in FILES:
        if not (SETS / f"{name}.jsonl").exists():
            print(f"{name}: {SETS / f'{name}.jsonl'} is missing, skipped")
            continue
        results = [judge(item, analyzer) for item in load(name)]
        written[name] = {"summary": report(name, results, errors=args.errors), "items": results}
    if args.out:
        args.out.write_text(json.dumps(written, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
