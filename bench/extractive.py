"""How often the extractive answer cites the gold abstract, with each passage's best sentence first or not.

``python -m bench.extractive [--first 100 --last 300]`` asks SciFact claims (in
qrels order; by default claims 101 to 300, apart from the 100-claim sample ``citeline eval --answers``
reports on) with the current search settings, gives the extractive answerer the top
``answer_passages`` passages, and counts the answers that cite a gold abstract. No model is involved.
Needs the SciFact corpus ingested in the namespace (``citeline eval`` does it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from citeline.answer.citations import CitationNumbering
from citeline.answer.extractive import extractive_answer
from citeline.answer.prompt import select_passages
from citeline.answer.support import VectorCache
from citeline.engine import Citeline
from citeline.eval.answers import claim_question, sample_claims
from citeline.eval.beir import load_beir
from citeline.settings import Settings

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--first", type=int, default=100, help="claims to skip")
    parser.add_argument("--last", type=int, default=300)
    parser.add_argument("--data", type=Path, default=SCIFACT)
    args = parser.parse_args(argv)
    data = load_beir(args.data)
    claims = sample_claims(data, args.last)[args.first :]
    with Citeline(Settings()) as cl:
        asked = []
        for claim in claims:
            question = claim_question(data.queries[claim])
            hits = cl.search(question)[: cl.settings.answer_passages]
            asked.append((claim, question, select_passages(hits)))
        for first in (True, False):
            cited_gold = given_gold = 0
            for claim, question, passages in asked:
                gold = set(data.qrels[claim])
                answer = extractive_answer(
                    question,
                    passages,
                    CitationNumbering(),
                    VectorCache(cl.embedder),
                    each_passage_first=first,
                )
                cited = {p.hit.document_name for p in passages if p.chunk_id in answer.cited}
                cited_gold += bool(cited & gold)
                given_gold += bool({p.hit.document_name for p in passages} & gold)
            print(
                f"each passage first: {first}: gold cited in {cited_gold} of {len(asked)} answers "
                f"(gold among the passages in {given_gold})"
            )


if __name__ == "__main__":
    main()
