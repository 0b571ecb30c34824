"""Open questions on the user guide: is the section that answers each one found, and cited
(``python -m bench.guide_answers``).

Every answer figure elsewhere is measured on SciFact claims, which citeline judges ("Is it true that
...?") and answers through the verdict path. What ``make demo`` and most users ask is an open question
("How do I back up a namespace?"), answered from the passages a search gives, by the local model or,
without one, by the extractive answer. This script asks :data:`QUESTIONS`, each written with the
section (or sections) of the guide that answers it, about the guide as it was at :data:`GUIDE_COMMIT`
(ingested once into ``--data-dir``, namespace ``bench_guide_<commit>``), and reports per question and
as shares:

- ``found``: a passage of an answering section is among the passages given (``answer_passages``);
- ``first``: the best-ranked passage is one;
- ``model_gold``: the local model's answer (as ``citeline ask`` gives it: attribution, fallback and all)
  cites one; ``model_own``: a citation the model wrote itself does, in an answer that did not fall back;
- ``fell_back``: the model's reply was replaced by the extractive answer;
- ``extractive_gold``: the extractive answer (``CITELINE_LLM=extractive``) cites one;
- ``model_first`` and ``extractive_first``: the answer's first citation is one. An answer that quotes
  three passages has three chances to cite a section, the model's mostly one: the first citation
  compares them more fairly.

The questions were written from the guide's headings before any answer was read. A passage counts
for a section when its chunk's section heading is that heading (backticks and case aside).

    .venv/bin/python -m bench.guide_answers --data-dir /tmp/guide-bench [--replies out.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bench.answers import ask
from bench.api import frozen_guide
from citeline.answer import Complete
from citeline.answer.llm import get_llm
from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.search import Hit, SearchRequest
from citeline.settings import Settings

#: The guide asked about; the questions' sections are its headings. Change it only with the questions.
GUIDE_COMMIT = "b8587578bbd9f6f0981a0c947dd249bcd92e5009"

#: Each question with the sections that answer it, as ``file#heading``.
QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("How do I back up a namespace?", ("deploying.md#Backing up and restoring",)),
    (
        "What happens when I ingest a scanned PDF?",
        (
            "troubleshooting.md#Scanned PDF: no text layer (scanned?)",
            "ingesting.md#PDF",
        ),
    ),
    (
        "Why are the default chunk size 800 and the overlap 120?",
        ("ingesting.md#Why the defaults are 800 and 120",),
    ),
    ("How do I delete a document?", ("ingesting.md#Deleting documents",)),
    ("What does citeline refresh do?", ("ingesting.md#Picking up changed sources: citeline refresh",)),
    ("How do I change the embedding model?", ("ingesting.md#Changing the embedding model",)),
    ("Which file types can citeline ingest?", ("ingesting.md#Supported file types",)),
    ("How are CSV files split into chunks?", ("ingesting.md#CSV and TSV",)),
    ("Does a document without a scope show up in every scoped search?", ("scopes.md#The scope rule",)),
    ("How do filters on category and tags combine?", ("scopes.md#How filters combine",)),
    ("Should I use scopes or namespaces to keep two clinics apart?", ("scopes.md#Scopes or namespaces",)),
    (
        "How do I change the scopes of a document that is already ingested?",
        ("scopes.md#Changing a document's scopes",),
    ),
    ("What do the exit codes of citeline mean?", ("troubleshooting.md#Errors and exit codes",)),
    ("What should I do when pgvector is missing?", ("troubleshooting.md#pgvector is missing",)),
    (
        "Why does a document stay in status processing?",
        ("troubleshooting.md#A document stays in status processing, or failed as interrupted",),
    ),
    (
        "Why does the answer say that no passage matches the question closely enough?",
        (
            "troubleshooting.md#No passage in the documents matches this question closely enough",
            "conversations.md#When the evidence does not answer",
        ),
    ),
    ("Which personas can answer questions?", ("conversations.md#Personas",)),
    ("How does citeline check the citations in an answer?", ("conversations.md#Citations are checked",)),
    (
        "What happens to a citation when the document it points to changes?",
        ("conversations.md#Citations after a document changes",),
    ),
    ("What survives a worker that is killed during a build?", ("deploying.md#What survives what",)),
    (
        "How do I run citeline with Docker Compose?",
        (
            "deploying.md#compose.yaml",
            "deploying.md#Setting it up",
        ),
    ),
    (
        "Where does citeline store its data by default?",
        (
            "index.md#Where the data lives: embedded or external PostgreSQL",
            "configuration.md#Embedded mode",
        ),
    ),
    ("How do I use citeline from Python?", ("index.md#Using citeline from Python",)),
    ("Does citeline send anything over the network?", ("configuration.md#What goes over the network",)),
    (
        "How do I connect citeline to an external PostgreSQL server?",
        (
            "configuration.md#External mode",
            "index.md#Where the data lives: embedded or external PostgreSQL",
        ),
    ),
    ("Can I use Chroma instead of pgvector?", ("configuration.md#Vector backends",)),
    ("How do I write my own embedding provider?", ("configuration.md#A provider of your own",)),
    ("What does the admin page show?", ("web.md#Admin (/admin)",)),
    (
        "How does the citation viewer find the cited span on a PDF page?",
        (
            "web.md#How the span is found on a PDF page",
            "web.md#The citation viewer",
        ),
    ),
    (
        "How are model numbers found in chunks?",
        (
            "ingesting.md#Auto-metadata: model numbers and section types",
            "scopes.md#Model numbers and section types",
        ),
    ),
    ("How do I ingest a whole folder?", ("ingesting.md#Folders",)),
    ("What is cleaned from the text during ingestion?", ("ingesting.md#Text cleaning",)),
)


def _key(text: str | None) -> str:
    return " ".join((text or "").replace("`", "").casefold().split())


def answers_from(hit: Hit, gold: tuple[str, ...]) -> bool:
    """Whether ``hit`` is a passage of one of the ``gold`` sections (``file#heading``)."""
    name = Path(hit.document_name).name
    return any(f"{name}#{_key(hit.section)}" == _key(section) for section in gold)


def _complete(question: str, hits: list[Hit], cl: Citeline, llm: Any) -> Complete:
    """``question`` answered from ``hits`` as ``citeline ask`` answers it (``llm`` None: extractive)."""
    answered: Complete = asyncio.run(
        ask(question, hits, cl, llm, cl.settings.answer_evidence_tokens or None)
    )["complete"]
    return answered


def _cites(
    done: Complete, hits: list[Hit], gold: tuple[str, ...], *, own: bool = False, first: bool = False
) -> bool:
    """Whether ``done`` cites a passage of a ``gold`` section: any citation, one the model wrote itself
    (``own``), or the first one in the answer (``first``)."""
    by_chunk = {h.chunk_id: h for h in hits}
    cited = [c for c in done.citations if not (own and (c.attributed or done.fell_back))]
    return any(
        c.chunk_id in by_chunk and answers_from(by_chunk[c.chunk_id], gold)
        for c in cited[: 1 if first else None]
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    guide, commit = frozen_guide(args.data_dir, GUIDE_COMMIT)
    settings = Settings(data_dir=args.data_dir, namespace=f"bench_guide_{commit[:12]}")
    llm = None if args.no_model else get_llm(settings.llm, Settings())
    rows: list[dict[str, Any]] = []
    with Citeline(settings) as cl:
        cl.ingest([guide], IngestOptions(category="citeline/guide"))
        for question, gold in QUESTIONS:
            hits = cl.search(SearchRequest(query=question, top_k=cl.settings.answer_passages))
            extractive = _complete(question, hits, cl, None)
            row: dict[str, Any] = {
                "question": question,
                "found": any(answers_from(h, gold) for h in hits),
                "first": bool(hits) and answers_from(hits[0], gold),
                "extractive_gold": _cites(extractive, hits, gold),
                "extractive_first": _cites(extractive, hits, gold, first=True),
            }
            if llm is not None:
                done = _complete(question, hits, cl, llm)
                row.update(
                    model_gold=_cites(done, hits, gold),
                    model_first=_cites(done, hits, gold, first=True),
                    model_own=_cites(done, hits, gold, own=True),
                    fell_back=done.fell_back,
                    answer=done.answer,
                )
            rows.append(row)
            print(
                f"{len(rows):3d} found {row['found']!s:5} model {row.get('model_gold')!s:5} "
                f"extractive {row['extractive_gold']!s:5} {question}",
                file=sys.stderr,
            )
    if llm is not None:
        llm.close()
    if args.replies:
        args.replies.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    keys = ["found", "first", "extractive_gold", "extractive_first"]
    keys += [] if llm is None else ["model_gold", "model_first", "model_own", "fell_back"]
    summary: dict[str, Any] = {k: round(sum(bool(r[k]) for r in rows) / len(rows), 3) for k in keys}
    summary.update(questions=len(rows), guide=commit)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a data dir of its own for the guide")
    parser.add_argument("--no-model", action="store_true", help="only retrieval and the extractive answer")
    parser.add_argument("--replies", type=Path, help="write each question's figures as a JSON line here")
    print(json.dumps(run(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
