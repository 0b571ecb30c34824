"""Cited answers from the default local model on SciFact claims: do its citations hold, and how fast.

Run from the repository root, against a namespace that holds the SciFact corpus (``citeline eval``
builds one)::

    .venv/bin/python -m bench.answers --data-dir /tmp/eval-data --namespace eval_scifact \\
        [--claims 20] [--budget 150] [--model-dir /tmp/citeline-bench-llm] [--replies out.jsonl] \\
        [--hits hits.json]

``--hits`` keeps the evidence fixed across runs: the hits are searched and written on the first run,
and read back on later ones (a namespace re-ingested with other chunk sizes would change them).

The claims are those at odd positions (0-based: the 2nd, 4th, ...) of ``queries.jsonl``, so that a
sample drawn from the even positions stays unseen. Each claim is asked as the question: searched with the
namespace's settings (``answer_passages`` hits), then answered by :func:`citeline.answer.answer_stream`
with the local model, exactly as ``citeline ask`` does. Reported, as shares of the claims:

- ``own_cited``: the answer keeps a citation the model wrote itself (no fallback, not only citeline's
  attributions);
- ``gold_cited_own``: a gold abstract is among the model's own citations;
- ``gold_cited``: a gold abstract is among the answer's citations, whoever made them (the model, the
  attribution of uncited sentences, or the extractive fallback);
- ``gold_given``: a gold abstract was among the passages the model read;
- ``fell_back``, ``attributed`` (an answer with at least one citation citeline added), ``uncited`` (an
  answer with a claim left uncited), ``unsupported``, ``uncited_answers`` (an answer with no citation:
  must be 0);

and the medians of time to the first streamed word after retrieval (wall, and this process's CPU time
across all threads: the steadier figure on a shared machine) and of the evidence tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from citeline.answer import CitationNumbering, Complete, Start, Token, answer_stream
from citeline.answer.evidence import approx_evidence_tokens
from citeline.answer.llm import GenerationOptions, get_llm
from citeline.engine import Citeline
from citeline.retrieve.search import Hit, SearchRequest
from citeline.settings import Settings

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"


def claims(scifact: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` claims at odd positions of queries.jsonl, with their gold abstract ids."""
    gold: dict[str, set[str]] = {}
    for line in (scifact / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, _ = line.split("\t")
        gold.setdefault(query, set()).add(doc)
    with (scifact / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [json.loads(line) for line in fh if line.strip()]
    odd = [q for i, q in enumerate(queries) if i % 2 == 1 and q["_id"] in gold]
    return [{"id": q["_id"], "claim": q["text"], "gold": sorted(gold[q["_id"]])} for q in odd[:count]]


def load_hits(path: Path) -> dict[str, list[Hit]]:
    """Stored hits by claim id (see ``--hits``), so that runs compare on the same evidence."""
    stored = json.loads(path.read_text(encoding="utf-8"))
    return {
        claim: [Hit(**{**h, "document_id": uuid.UUID(h["document_id"])}) for h in hits]
        for claim, hits in stored.items()
    }


async def ask(claim: str, hits: list[Hit], cl: Citeline, llm: Any, budget: int | None) -> dict[str, Any]:
    began_cpu = time.process_time()
    first_cpu: float | None = None
    given: list[str] = []
    evidence_tokens = 0
    complete: Complete | None = None
    async for event in answer_stream(
        claim,
        hits,
        llm=llm,
        embedder=cl.embedder,
        numbering=CitationNumbering(),
        persona=cl.settings.persona,
        options=GenerationOptions.from_settings(cl.settings),
        max_evidence_tokens=budget,
    ):
        if isinstance(event, Start):
            given = [p.hit.document_name for p in event.passages]
            evidence_tokens = approx_evidence_tokens(event.passages)
        elif isinstance(event, Token) and first_cpu is None:
            first_cpu = time.process_time() - began_cpu
        elif isinstance(event, Complete):
            complete = event
    assert complete is not None
    return {"complete": complete, "given": given, "ttft_cpu_s": first_cpu, "evidence_tokens": evidence_tokens}


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(data_dir=args.data_dir, namespace=args.namespace)
    model_settings = Settings(
        data_dir=args.model_dir,
        llm_threads=args.threads,
        llm_batch_threads=args.batch_threads,
        llm_citation_grammar=not args.no_grammar,
    )
    llm = get_llm(settings.llm, model_settings)
    budget = args.budget or None
    rows: list[dict[str, Any]] = []
    stored = load_hits(args.hits) if args.hits and args.hits.exists() else None
    searched: dict[str, list[dict[str, Any]]] = {}
    with Citeline(settings) as cl:
        # Loads the model and the search index, and caches the system prompt.
        warm_up = "Is water wet?"
        asyncio.run(ask(warm_up, cl.search(warm_up), cl, llm, budget))
        for item in claims(args.scifact, args.claims):
            hits = stored[item["id"]] if stored is not None else None
            if hits is None:
                hits = cl.search(SearchRequest(query=item["claim"], top_k=cl.settings.answer_passages))
                searched[item["id"]] = [h.as_dict() for h in hits]
            out = asyncio.run(ask(item["claim"], hits, cl, llm, budget))
            done: Complete = out["complete"]
            gold = set(item["gold"])
            own = [c for c in done.citations if not c.attributed] if not done.fell_back else []
            rows.append(
                {
                    **item,
                    "answer": done.answer,
                    "provider": done.provider,
                    "fallback_reason": done.fallback_reason,
                    "own_cited": bool(own),
                    "gold_cited_own": bool({c.document_name for c in own} & gold),
                    "gold_cited": bool({c.document_name for c in done.citations} & gold),
                    "gold_given": bool(set(out["given"]) & gold),
                    "fell_back": done.fell_back,
                    "attributed": any(c.attributed for c in done.citations),
                    "uncited": bool(done.uncited),
                    "unsupported": bool(done.unsupported),
                    "uncited_answers": not done.citations,
                    "ttft_s": (done.timings.first_token or 0.0) / 1e3,
                    "ttft_cpu_s": out["ttft_cpu_s"],
                    "evidence_tokens": out["evidence_tokens"],
                    "timings_ms": asdict(done.timings),
                }
            )
            print(
                f"{len(rows):3d} ttft {rows[-1]['ttft_s']:.2f}s gold {rows[-1]['gold_cited']!s:5} "
                f"{done.answer[:110]!r}",
                file=sys.stderr,
            )
    llm.close()
    if args.hits and stored is None:
        args.hits.write_text(json.dumps(searched), encoding="utf-8")
    if args.replies:
        with args.replies.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    shares = (
        "own_cited", "gold_cited_own", "gold_cited", "gold_given", "fell_back", "attributed", "uncited",
        "unsupported", "uncited_answers",
    )  # fmt: skip
    summary: dict[str, Any] = {k: round(sum(r[k] for r in rows) / len(rows), 3) for k in shares}
    for key in ("ttft_s", "ttft_cpu_s", "evidence_tokens"):
        summary[f"{key}_median"] = round(statistics.median(r[key] for r in rows), 3)
    summary.update(
        claims=len(rows),
        budget=budget,
        threads=args.threads,
        batch_threads=args.batch_threads,
        grammar=not args.no_grammar,
        load_average=os.getloadavg(),
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="data dir holding the SciFact namespace")
    parser.add_argument("--namespace", default="eval_scifact")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    parser.add_argument("--claims", type=int, default=20)
    parser.add_argument("--budget", type=int, default=Settings().answer_evidence_tokens, help="0: whole")
    parser.add_argument("--threads", type=int, default=Settings().llm_threads)
    parser.add_argument("--batch-threads", type=int, default=Settings().llm_batch_threads)
    parser.add_argument("--no-grammar", action="store_true")
    parser.add_argument(
        "--model-dir", type=Path, default=Path("/tmp/citeline-bench-llm"), help="where the joined model is"
    )
    parser.add_argument("--replies", type=Path, help="write each answer as a JSON line here")
    parser.add_argument(
        "--hits", type=Path, help="JSON of each claim's hits: read if it exists, else searched and written"
    )
    print(json.dumps(run(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
