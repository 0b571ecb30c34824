"""Looking up an exact code: is the one passage that holds it ranked first?
(``python -m bench.code_lookup``).

A repair manual's reader asks for a part number or an error code, often the code alone
("737-31-1860", "E4021"); a clinician for a gene variant ("rs2476601"). Only the keyword list can
find such a code, and it finds it in one passage; the dense list, meaningless for the query, is a
flat list of near-equal similarities. Fusion must not let that flat list outrank the one exact match.

The codes are taken from a BEIR corpus by one rule, never chosen: words of at least four characters
mixing letters and digits (dashes and slashes allowed inside, but no ordinary word of five letters or
more between them: "800-fold" is not a code) that appear in exactly one document of
the corpus; ``--sample`` of them (seeded) are asked alone, as "What is <code>?" (a query of codes
once its stop words are set aside) and as "What does <code> mean?" (a word beside it). For each, the
rank of the first hit whose text holds the code is reported (first, top 5, top 10, MRR@10), searching
the namespace ``citeline eval`` built (ingest the corpus with it first). ``--ranks`` writes the ranks,
and ``--pair OLD NEW`` pairs two runs (the old code with ``PYTHONPATH=<its src>``), as
:mod:`bench.table_rows` does.

    CITELINE_DATA_DIR=/tmp/eval .venv/bin/citeline eval ../shared/eval/scifact
    CITELINE_DATA_DIR=/tmp/eval .venv/bin/python -m bench.code_lookup --ranks new.json
    .venv/bin/python -m bench.code_lookup --pair old.json new.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path

from bench.table_rows import pair, summary

_WORD = re.compile(r"(?<![\w/-])[A-Za-z0-9](?:[A-Za-z0-9/-]*[A-Za-z0-9])?(?![\w/-])")


def _is_code(word: str) -> bool:
    # "800-fold", "p53-regulated", "nucleosome-1": a word with a number, not a code.
    parts = re.split(r"[/-]", word)
    worded = any(p.isalpha() and len(p) >= 5 and (p.islower() or p.istitle()) for p in parts)
    return len(word) >= 4 and any(c.isdigit() for c in word) and any(c.isalpha() for c in word) and not worded


def codes(corpus: Path, sample: int, seed: int = 0) -> list[str]:
    """``sample`` codes (seeded) each found in exactly one document of ``corpus`` (BEIR jsonl)."""
    holders: dict[str, set[str]] = defaultdict(set)
    spelled: dict[str, str] = {}
    for line in corpus.read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        for word in _WORD.findall(f"{doc.get('title', '')}\n{doc.get('text', '')}"):
            if _is_code(word):
                holders[word.lower()].add(str(doc["_id"]))
                spelled.setdefault(word.lower(), word)
    unique = sorted(spelled[w] for w, docs in holders.items() if len(docs) == 1)
    return random.Random(seed).sample(unique, min(sample, len(unique)))


#: Each form a code is asked in, and its question. The last two were added with the words a lookup is
#: asked with (``Analyzer.only_codes``), to see them on forms other than the one that showed the need.
_FORMS = (
    ("alone", "{code}"),
    ("what is", "What is {code}?"),
    ("what does it mean", "What does {code} mean?"),
    ("what does it stand for", "What does {code} stand for?"),
    ("error code", "error code {code}"),
    # Added with the spellings of a code (``Analyzer.unjoined_codes``): a code printed with dashes or
    # slashes, typed without them ("737311860" for "737-31-1860"); asked of those codes only.
    ("without separators", "{squashed}"),
)


def ranks(folder: Path, namespace: str, sample: int) -> dict[str, list[int | None]]:
    """Per form of question, each code's rank of the first hit holding it (None: not in the top 10)."""
    import os

    os.environ["CITELINE_QUERY_CACHE_SIZE"] = "0"
    from citeline.engine import Citeline
    from citeline.retrieve.search import SearchRequest
    from citeline.settings import Settings

    asked = codes(folder / "corpus.jsonl", sample)
    found: dict[str, list[int | None]] = {form: [] for form, _ in _FORMS}
    with Citeline(Settings(namespace=namespace)) as cl:
        for code in asked:
            holds = re.compile(rf"(?<![\w/-]){re.escape(code)}(?![\w/-])", re.IGNORECASE)
            squashed = re.sub(r"[/-]", "", code)
            for form, template in _FORMS:
                if "{squashed}" in template and squashed == code:
                    continue
                hits = cl.search(SearchRequest(template.format(code=code, squashed=squashed), top_k=10))
                found[form].append(next((i + 1 for i, h in enumerate(hits) if holds.search(h.text)), None))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path("../shared/eval/scifact"), help="BEIR folder")
    parser.add_argument("--namespace", default="eval_scifact", help="where citeline eval ingested it")
    parser.add_argument("--sample", type=int, default=300, help="codes asked")
    parser.add_argument("--ranks", type=Path, help="write the ranks here (JSON)")
    parser.add_argument("--pair", nargs=2, type=Path, metavar=("OLD", "NEW"), help="pair two --ranks files")
    args = parser.parse_args()
    if args.pair:
        old, new = (json.loads(p.read_text()) for p in args.pair)
        for form in old:
            print(f"{form}:\n  old: {summary(old[form])}\n  new: {summary(new[form])}")
            print(f"  {pair(old[form], new[form])}")
        return
    found = ranks(args.folder, args.namespace, args.sample)
    for form, form_ranks in found.items():
        print(f"{form}: {summary(form_ranks)}")
    if args.ranks:
        args.ranks.write_text(json.dumps(found))


if __name__ == "__main__":
    main()
