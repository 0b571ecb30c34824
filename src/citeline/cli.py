"""The ``citeline`` command: a thin shell over :class:`citeline.engine.Citeline`."""

from __future__ import annotations

import asyncio
import getpass
import ipaddress
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text

from citeline.access import Role
from citeline.annotate import SectionType
from citeline.answer import Complete, Error, Token
from citeline.chat.session import ChatSession, TurnExplain
from citeline.engine import Citeline
from citeline.errors import CitelineError, ConfigError, InvalidRequestError
from citeline.eval.stats import SHUFFLES
from citeline.ingest import IngestInterrupted, IngestOptions, IngestResult, Outcome, discover
from citeline.jobs.submit import Refreshed, parse_age
from citeline.load import short_type
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Copy, Explain, Hit, SearchRequest, Timings
from citeline.settings import Fusion, Settings, load_settings
from citeline.store import catalog, keys
from citeline.store.model_migration import MigrationStatus
from citeline.store.models import Status
from citeline.types import counted, printable

if TYPE_CHECKING:
    from citeline.eval.beir import BeirData
    from citeline.eval.migration import CheckResult
    from citeline.store.backup import Manifest

app = typer.Typer(
    help="citeline: ingest documents, search them, answer with citations.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
docs_app = typer.Typer(help="List, show and delete documents.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")

# soft_wrap: long paths and messages stay on one line, so they can be grepped and copied.
console = Console(soft_wrap=True, emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)
# The width a table is given when its output is not a terminal: more than any row needs, so each row
# is laid out at its natural width, on one line.
_UNFOLDED_WIDTH = 100_000


def _print_json(data: Any) -> None:
    """Plain JSON on stdout, one document per line: for pipes and programs, no colour or wrapping."""
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def _shown(text: str) -> str:
    """A name, label or message from a document or a user, for a line of Rich output: its control
    characters as escapes (see :func:`printable`), its square brackets as text, not markup."""
    return escape(printable(text))


T = TypeVar("T")


def _print_version(wanted: bool) -> None:
    if wanted:
        from citeline import __version__
        from citeline.store.database import head_revision

        # The schema revision says more than the version: it is what an upgrade or downgrade changes.
        console.print(f"citeline {__version__} (schema revision {head_revision()})", highlight=False)
        raise typer.Exit


@app.callback()
def main(
    ctx: typer.Context,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (CITELINE_DATA_DIR).")] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace (CITELINE_NAMESPACE).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what happens.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print citeline's version and the schema revision it migrates namespaces to.",
        ),
    ] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if namespace is not None:
        overrides["namespace"] = namespace
    ctx.obj = overrides


#: The settings that citeline's own options set, by the option's name.
_GLOBAL_OPTIONS = {"data_dir": "--data-dir", "namespace": "--namespace"}


def _settings(ctx: typer.Context, **more: Any) -> Settings:
    try:
        return load_settings(**{**(ctx.obj or {}), **more})
    except ConfigError as exc:
        message = str(exc)
        for field, option in _GLOBAL_OPTIONS.items():
            if field in (ctx.obj or {}):
                # A value given as an option is named as the option, not as a variable nobody set.
                variable = f"CITELINE_{field.upper()}"
                message = message.replace(f"{variable}:", f"{option} ({variable}):")
        err.print(f"[red]error:[/red] {_shown(message)}", highlight=False)
        raise typer.Exit(exc.exit_code) from exc


def _citeline(ctx: typer.Context, **more: Any) -> AbstractContextManager[Citeline]:
    """Open the library on a namespace the database holds; turn its errors into a message and the
    error's exit code. A mistyped ``--namespace`` is named, not answered from a new, empty namespace."""
    return _open(ctx, more, create=False)


def _creating(ctx: typer.Context, **more: Any) -> AbstractContextManager[Citeline]:
    """As :func:`_citeline`, making the namespace if the database lacks it: for the commands that put
    something in it (ingest, a first API key, eval's corpus)."""
    return _open(ctx, more, create=True)


@contextmanager
def _open(ctx: typer.Context, more: dict[str, Any], *, create: bool) -> Iterator[Citeline]:
    try:
        with Citeline(_settings(ctx, **more), create=create) as cl:
            yield cl
    except CitelineError as exc:
        err.print(f"[red]error:[/red] {_shown(str(exc))}", highlight=False)
        raise typer.Exit(exc.exit_code) from exc


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except CitelineError as exc:
        err.print(f"[red]error:[/red] {_shown(str(exc))}", highlight=False)
        raise typer.Exit(exc.exit_code) from exc


def _age(option: str, text: str | None) -> timedelta | None:
    """The age an option was given (None when it was not), or exit naming the option: an empty one
    is refused, not taken for no age at all (a script's unset variable read every source again)."""
    if text is None:
        return None
    try:
        return parse_age(text)
    except InvalidRequestError as exc:
        err.print(f"[red]error:[/red] {option}: {_shown(str(exc))}", highlight=False)
        raise typer.Exit(exc.exit_code) from exc


# The filter options of every command that searches (search, ask, chat): one definition, so the three
# accept the same filters with the same words.
ScopeOption = Annotated[
    list[str], typer.Option("--scope", "-s", help="Only documents in this scope (or universal).")
]
CategoryOption = Annotated[str | None, typer.Option(help="Only this category or below it.")]
TagOption = Annotated[list[str], typer.Option("--tag", "-t", help="Documents with any of these tags.")]
AllTagsOption = Annotated[list[str], typer.Option("--all-tags", help="Documents with all of these tags.")]
TypeOption = Annotated[
    list[str],
    typer.Option(
        "--type", help="Only these content types: pdf, text, markdown, html, csv (or application/pdf, ...)."
    ),
]
MetaOption = Annotated[list[str], typer.Option("--meta", help="Metadata KEY=VALUE that must match.")]
ModelOption = Annotated[
    list[str], typer.Option("--model", help="Chunks naming this model number (any spelling: XR-200, xr200).")
]
SectionOption = Annotated[
    list[SectionType], typer.Option("--section", help="Chunks of this section type (repeatable).")
]


DocumentOption = Annotated[
    list[str],
    typer.Option(
        "--document", help="Only this document: its id or a unique start of it, as `docs list` shows."
    ),
]


def _with_documents(cl: Citeline, filters: Filters, refs: list[str]) -> Filters:
    """``filters`` kept to the documents ``refs`` name (ids or unique id prefixes, resolved as `docs show`
    resolves them: an unknown or ambiguous one is refused)."""
    if not refs:
        return filters
    return _guard(lambda: replace(filters, document_ids=cl.document_ids(refs)))


#: The filter options by the field of Filters each sets: the library's errors name the field.
_FILTER_FLAGS = {
    "scopes": "--scope",
    "category": "--category",
    "tags": "--tag / --all-tags",
    "content_types": "--type",
    "metadata": "--meta",
    "model_numbers": "--model",
    "section_types": "--section",
}


def _filters(
    scope: list[str],
    category: str | None,
    tag: list[str],
    all_tags: list[str],
    types: list[str],
    meta: list[str],
    models: list[str],
    sections: list[SectionType],
) -> Filters:
    try:
        return Filters(
            scopes=tuple(scope) or None,
            category=category,
            tags_any=tuple(tag),
            tags_all=tuple(all_tags),
            content_types=tuple(types),
            metadata=_parse_metadata(meta),
            model_numbers=tuple(models),
            section_types=tuple(s.value for s in sections),
        )
    except InvalidRequestError as exc:
        # "content_types: unknown content type 'docx'" names no option the user typed: "--type
        # (content_types): ...".
        message = str(exc)
        field, colon, rest = message.partition(":")
        flag = _FILTER_FLAGS.get(field) if colon else None
        shown = f"{flag} ({field}):{rest}" if flag else message
        err.print(f"[red]error:[/red] {_shown(shown)}", highlight=False)
        raise typer.Exit(exc.exit_code) from exc


def _parse_metadata(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequestError(f"metadata must be KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


@app.command()
def ingest(
    ctx: typer.Context,
    paths: Annotated[list[str], typer.Argument(help="Files, folders (recursively) or http(s) URLs.")],
    scope: Annotated[
        list[str], typer.Option("--scope", "-s", help="Scope (repeatable). Unset: keep the current ones.")
    ] = [],  # noqa: B006
    universal: Annotated[bool, typer.Option(help="Remove all scopes: visible from every scope.")] = False,
    category: Annotated[str | None, typer.Option(help="Category path, e.g. Engineering/Security.")] = None,
    tag: Annotated[list[str], typer.Option("--tag", "-t", help="Tag (repeatable).")] = [],  # noqa: B006
    meta: Annotated[list[str], typer.Option("--meta", help="Metadata KEY=VALUE (repeatable).")] = [],  # noqa: B006
    chunk_size: Annotated[int | None, typer.Option(help="Characters per chunk.")] = None,
    chunk_overlap: Annotated[
        int | None, typer.Option(help="Characters shared by neighbouring chunks.")
    ] = None,
    # None when neither form is given: the setting decides. "--no-allow-private-urls" refuses them.
    allow_private_urls: Annotated[
        bool | None,
        typer.Option(
            help="Allow URLs on loopback/private networks (default: CITELINE_URL_ALLOW_PRIVATE); "
            "the no- form refuses them whatever the setting."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per source.")] = False,
) -> None:
    """Ingest documents: PDF, text, Markdown, HTML (file or URL) and CSV."""
    if universal and scope:
        err.print("[red]error:[/red] --universal removes all scopes; it cannot be combined with --scope")
        raise typer.Exit(2)
    options = _guard(
        lambda: IngestOptions(
            scopes=() if universal else (tuple(scope) or None),
            category=category,
            tags=tuple(tag) or None,
            metadata=_parse_metadata(meta) or None,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            uploaded_by=_cli_user(),
        )
    )
    sources = discover(paths)
    if not sources:
        err.print("[yellow]nothing to ingest:[/yellow] no supported files under " + _shown(", ".join(paths)))
        raise typer.Exit(1)
    with _creating(ctx) as cl:
        results: list[IngestResult] = []
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            disable=as_json or not err.is_terminal,
            transient=True,
        )
        with progress:
            task = progress.add_task("ingesting", total=len(sources))

            def on_result(result: IngestResult) -> None:
                progress.advance(task)
                if as_json:
                    _print_json(result.as_dict())
                else:
                    progress.console.print(_describe(result), highlight=False)

            try:
                cl.prepare_ingest()  # load the model before the clock of the first file starts
                # Either form of the flag decides; without it the setting does, as for the server's jobs.
                results = cl.ingest(
                    sources, options, progress=on_result, allow_private_urls=allow_private_urls
                )
            except KeyboardInterrupt as stop:
                progress.stop()
                _interrupted(stop)
    failed = sum(r.outcome is Outcome.FAILED for r in results)
    stored = sum(r.chunks for r in results if r.outcome in (Outcome.ADDED, Outcome.UPDATED))
    if not as_json:
        done = counted(len(_own(results)), "source")
        err.print(f"{done}: {_outcomes(results)}; {counted(stored, 'chunk')} stored")
    if failed:
        raise typer.Exit(65)


def _own(results: Sequence[IngestResult]) -> list[IngestResult]:
    """The results of the sources themselves: during a model migration a source's staged copy is a
    second result of the same source."""
    return [r for r in results if r.outcome is not Outcome.STAGED]


def _outcomes(results: Sequence[IngestResult]) -> str:
    """``2 added, 1 failed``: how many sources had each outcome."""
    own = _own(results)
    counts = {o: sum(r.outcome is o for r in own) for o in Outcome}
    summary = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "nothing done"
    if staged := len(results) - len(own):
        summary += f" (and {staged} staged for the model migration)"
    return summary


def _interrupted(stop: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C during an ingest: one line on what was done before it and what it leaves, then exit 130
    (128 + SIGINT) as a shell's interrupted command does."""
    results = stop.results if isinstance(stop, IngestInterrupted) else []
    line = f"interrupted: {_outcomes(results)} before the stop"
    if isinstance(stop, IngestInterrupted) and stop.building:
        # What the next command does with them (catalog.fail_abandoned), and what makes them whole.
        line += (
            f"; {counted(stop.building, 'version')} being built left processing: the next citeline command "
            "marks them failed (interrupted); run the same ingest again to build them"
        )
    err.print(line, highlight=False, markup=False)
    raise typer.Exit(130) from stop


def _describe(result: IngestResult) -> str:
    colour = {
        Outcome.ADDED: "green",
        Outcome.UPDATED: "green",
        Outcome.UNCHANGED: "dim",
        Outcome.RELABELLED: "cyan",
        Outcome.FAILED: "red",
        Outcome.RETRYING: "yellow",
        Outcome.STAGED: "magenta",
    }[result.outcome]
    if result.outcome is Outcome.FAILED:
        return f"[{colour}]failed[/{colour}]     {_shown(str(result.error))}"
    doc = result.document
    assert doc is not None
    detail = {
        Outcome.UNCHANGED: "content unchanged, nothing to do",
        Outcome.RELABELLED: "content unchanged, labels updated",
        Outcome.STAGED: f"v{doc.version} embedded by {doc.embedding_model}, {result.chunks} chunks: "
        "visible once the namespace switches to that model (citeline migrate)",
    }.get(
        result.outcome,
        f"v{doc.version}, {counted(doc.page_count or 0, 'page')}, {counted(result.chunks, 'chunk')} "
        f"({result.embedded} embedded) in {result.seconds:.1f}s",
    )
    ragged = doc.source_metadata.get("ragged_rows")
    if ragged and result.outcome in (Outcome.ADDED, Outcome.UPDATED):
        detail += f"; rows with fewer or more cells than the header: {ragged}"
    if result.same_content:
        # The same file under another name: stored all the same; relabelling the one there may be meant.
        detail += f"; same bytes as {_same_content_words(result.same_content, doc.scopes)}"
    return f"[{colour}]{result.outcome.value:<10}[/{colour}] {_shown(str(result.source))}: {_shown(detail)}"


def _same_content_words(same: tuple[catalog.SameContent, ...], scopes: list[str]) -> str:
    """The documents holding a file's bytes, with the scopes of those whose scopes differ from the
    copy's, and then the copy's: a copy scoped otherwise (universal, say) is seen by other readers."""

    def scoped(names: list[str] | tuple[str, ...]) -> str:
        return f"scopes {', '.join(names)}" if names else "universal"

    differ = [other for other in same if set(other.scopes) != set(scopes)]
    words = ", ".join(
        f"{other.name} ({scoped(other.scopes)})" if other in differ else other.name for other in same
    )
    if differ:
        words += f"; this copy has {scoped(scopes)}" if scopes else "; this copy is universal"
    return words


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    scope: ScopeOption = [],  # noqa: B006
    category: CategoryOption = None,
    tag: TagOption = [],  # noqa: B006
    all_tags: AllTagsOption = [],  # noqa: B006
    content_type: TypeOption = [],  # noqa: B006
    meta: MetaOption = [],  # noqa: B006
    model: ModelOption = [],  # noqa: B006
    section: SectionOption = [],  # noqa: B006
    document: DocumentOption = [],  # noqa: B006
    top_k: Annotated[int | None, typer.Option("--top-k", "-k", help="How many hits.")] = None,
    threshold: Annotated[
        float | None, typer.Option(min=0.0, max=2.0, help="Largest cosine distance kept (0..2).")
    ] = None,
    fusion: Annotated[Fusion | None, typer.Option(help="How to fuse dense and keyword rankings.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Hits as JSON.")] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="Also print the stage timings and the plan the search chose.")
    ] = False,
) -> None:
    """Hybrid search (dense + BM25) with filters applied inside the index queries."""
    request = _guard(
        lambda: SearchRequest(
            query=query,
            filters=_filters(scope, category, tag, all_tags, content_type, meta, model, section),
            top_k=top_k,
            distance_threshold=threshold,
            fusion=fusion,
        )
    )
    # One query per process: PostgreSQL scores BM25 and walks its vector index directly rather than
    # loading the in-memory keyword index and vectors, and the query embeds on the model session already
    # loaded (opening a second one for two threads takes far longer than they save on one query).
    timings, plan = Timings(), Explain()
    with _citeline(ctx, keyword_index="sql", memory_vectors_mb=0, query_threads=1) as cl:
        request = replace(request, filters=_with_documents(cl, request.filters, document))
        # Opened before the clock starts, so the total is the search's and not the process's start-up.
        cl.engine  # noqa: B018
        cl.query_embedder  # noqa: B018
        start = time.perf_counter()
        hits = cl.search(request, timings=timings, explain=plan)
        total_ms = (time.perf_counter() - start) * 1e3
        migration = cl.migration()
    if migration is not None:
        err.print(_migration_line(migration), highlight=False)
    if as_json:
        if explain:
            _print_json(
                {
                    "hits": [h.as_dict() for h in hits],
                    "explain": plan.as_dict(timings, total_ms),
                }
            )
        else:
            _print_json([h.as_dict() for h in hits])
        return
    _print_hits(hits)
    if hits and plan.codes_unwritten:
        # Else the reader takes the closest passages for the code's: nothing says it is not there.
        err.print(
            f"none of these passages writes {', '.join(plan.codes_unwritten)}: they are only the closest "
            "in meaning",
            highlight=False,
            markup=False,
        )
    if explain:
        _print_explain(timings, plan, total_ms)


def _print_explain(timings: Timings, plan: Explain, total_ms: float) -> None:
    """How a search ran: its plan, then its stages in the order they ran (waiting for the vector too)."""
    if plan.selectivity is None:
        scope = "unfiltered"
    else:
        scope = f"selectivity {plan.selectivity:.2%} ({plan.scope_chunks:,} of {plan.corpus_chunks:,} chunks)"
    vector = "from the cache" if plan.cache_hit else "embedded"
    console.print(
        f"plan: dense {plan.dense_plan}, {scope}; candidates {plan.dense_candidates} dense + "
        f"{plan.keyword_candidates} keyword"
        + (f" + {plan.document_candidates} whole documents" if plan.document_candidates else "")
        + f", {plan.fused_candidates} chunks fused; {plan.round_trips} round trips to PostgreSQL; "
        f"query vector {vector}"
        + ("; a query of codes: its keyword list weighed as a dense one" if plan.codes_only else "")
        + (
            f"; label boost lifted {plan.label_boosted} of {plan.fused_candidates} candidates"
            if plan.label_boosted is not None
            else ""
        ),
        highlight=False,
    )
    stages = {
        "embed": timings.embed,
        "catalog": timings.catalog,
        "keyword": timings.keyword,
        "wait for vector": plan.vector_wait,
        "dense": timings.dense,
        "fetch": timings.fetch,
        "fuse": timings.fuse,
        "rerank": timings.rerank,
    }
    console.print(
        "stages (ms): "
        + "  ".join(f"{name} {ms:.1f}" for name, ms in stages.items())
        + f"  total {total_ms:.1f}",
        highlight=False,
    )


def _place(page: int, rows: Sequence[int] | None) -> str:
    """Where a passage is, as a reader finds it: a CSV's rows ("row 7", "rows 12-14", as a spreadsheet
    numbers them), else its page ("p.3"). A CSV's "p.1" says nothing, and its chunk stored before rows
    were kept has only that."""
    if rows is None:
        return f"p.{page}"
    first, last = rows
    return f"row {first}" if first == last else f"rows {first}-{last}"


def _print_hits(hits: list[Hit]) -> None:
    if not hits:
        console.print("no hits")
        return
    for rank, hit in enumerate(hits, start=1):
        # Names and headings come from documents: printed as text, never read as markup.
        where = _shown(
            f"{hit.document_name} {_place(hit.page, hit.rows)}"
            + (f" § {hit.section}" if hit.section else "")
            + (f" [{hit.section_type}]" if hit.section_type else "")
            + (f" models {', '.join(hit.model_numbers)}" if hit.model_numbers else "")
        )
        console.print(
            f"[bold][{rank}][/bold] {where}  [dim]v{hit.version} chunk {hit.chunk_id} "
            f"chars {hit.start}-{hit.end}  similarity {hit.similarity:.3f}  bm25 {hit.keyword_score:.2f}  "
            f"fused {hit.fused_score:.4f}"
            + (f"  rerank {hit.rerank_score:.4f}" if hit.rerank_score is not None else "")
            # CITELINE_LABEL_BOOST's part: fused holds weight_source times it.
            + (f"  label boost {hit.label_boost:g}" if hit.label_boost else "")
            + "[/dim]",
            highlight=False,
        )
        if hit.context:
            # The rows of a table's later chunk, under the header row they are read with.
            console.print("    " + _shown(" ".join(hit.context.split())), style="dim", highlight=False)
        snippet = " ".join(hit.text.split())
        console.print(
            "    " + (snippet[:300] + ("…" if len(snippet) > 300 else "")), highlight=False, markup=False
        )
        _print_copies(hit.also_in)


def _print_copies(copies: Sequence[Copy]) -> None:
    """The same passage, word for word, in other documents: one hit or source, not several."""
    if copies:
        named = ", ".join(f"{copy.document_name} p.{copy.page}" for copy in copies)
        console.print("    also in: " + _shown(named), style="dim", highlight=False)


def _stream_answer(
    session: ChatSession, question: str, filters: Filters, *, as_json: bool, explain: bool = False
) -> Complete | None:
    """Ask ``question`` in ``session``, printing the answer as it streams, then its numbered sources
    (and with ``explain``, how the turn ran)."""
    turn = TurnExplain() if explain else None

    async def run() -> Complete | None:
        complete: Complete | None = None
        async for event in session.ask(question, filters=filters, explain=turn):
            if isinstance(event, Token) and not as_json:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Complete):
                complete = event
            elif isinstance(event, Error):
                if event.exception is not None:
                    raise event.exception
                raise CitelineError(event.message)
        return complete

    complete = _guard(lambda: asyncio.run(run()))
    if complete is None:
        return None
    if as_json:
        shown = {"conversation_id": str(session.id), **complete.as_dict()}
        _print_json(shown if turn is None else {**shown, "explain": turn.as_dict()})
        return complete
    if complete.stream_replaced:
        console.print(
            f"\n[yellow]the model's answer was replaced ({complete.fallback_reason}); "
            "extracted instead:[/yellow]"
        )
        console.print(complete.answer, highlight=False, markup=False)
    else:
        sys.stdout.write("\n")
    _print_sources(complete)
    if turn is not None:
        query = session.last_rewrite.query if session.last_rewrite is not None else question
        _print_turn(turn, complete, query if query != question else None)
    return complete


def _print_turn(turn: TurnExplain, complete: Complete, searched_for: str | None) -> None:
    """How an answer's turn ran: the search as ``search --explain`` shows it (and its query, when the
    question was rewritten into another), the turn's stages around it, then the answer's own."""
    if searched_for is not None:
        console.print(f"searched for: {searched_for}", highlight=False, markup=False)
    _print_explain(turn.search, turn.plan, turn.search_ms)
    console.print(
        f"turn (ms): history {turn.history_ms:.1f}  rewrite {turn.rewrite_ms:.1f}  "
        f"evidence {turn.evidence_ms:.1f} (the search and the passages earlier answers cited)",
        highlight=False,
    )
    t = complete.timings
    first = "" if t.first_token is None else f"  first token {t.first_token:.1f}"
    console.print(
        f"answer (ms): prompt {t.prompt:.1f}{first}  generation {t.generation:.1f}  "
        f"verify {t.verify:.1f}  total {t.total:.1f}",
        highlight=False,
    )


_STANCE_STYLE = {"supports": "green", "contradicts": "red", "neutral": "dim"}


def _print_sources(complete: Complete) -> None:
    if complete.verdict is not None:
        console.print(f"\n[bold]Verdict:[/bold] {complete.verdict.replace('_', ' ')}", highlight=False)
    if complete.citations:
        console.print("\n[bold]Sources[/bold]")
    for c in complete.citations:
        where = _shown(
            f"{c.document_name} {_place(c.page, c.rows)}" + (f" § {c.section}" if c.section else "")
        )
        if complete.claim is not None:
            # How the passage bears on the question's claim (see citeline.answer.stance).
            where += f"  [{_STANCE_STYLE[c.stance]}]{c.stance}[/{_STANCE_STYLE[c.stance]}]"
        flag = "" if c.supported else "  [yellow]not backed by this passage[/yellow]"
        # Cited by citeline for a sentence the model left uncited (see citeline.answer.attribution).
        where += " (attributed)" if c.attributed else ""
        console.print(
            f"[bold][{c.number}][/bold] {where}  [dim]v{c.version} chunk {c.chunk_id} "
            f"chars {c.start}-{c.end} support {c.score:.2f}[/dim]{flag}",
            highlight=False,
        )
        console.print("    " + " ".join(c.excerpt.split()), highlight=False, markup=False)
        _print_copies(c.also_in)
    # A removed citation is a note, like the provider's line: the answer as shown stands without it.
    for r in complete.removed:
        reason = _shown(r.reason)
        console.print(f"[dim]removed citation \\[{r.number}]: {reason}[/dim]", highlight=False)
    for u in complete.unsupported:
        console.print(f"unsupported: {u.text}", style="yellow", highlight=False, markup=False)
    for sentence in complete.uncited:
        console.print(f"uncited: {sentence}", style="yellow", highlight=False, markup=False)
    # With no passage to answer from, citeline says so itself: no model was asked.
    note = "no passage to answer from: no model was asked" if complete.evidence_missing else ""
    note = note or f"answered by {complete.provider}"
    if complete.fell_back:
        note += f" (fallback: {complete.fallback_reason})"
    console.print(f"[dim]{note}[/dim]", highlight=False)


def _conversation(cl: Citeline, conversation: str | None, persona: str | None) -> ChatSession:
    """A new conversation, or ``conversation`` resumed; says so when ``persona`` cannot apply to it."""
    session = _guard(lambda: cl.chat(conversation, persona=persona))
    if conversation is not None and persona is not None and persona != session.conversation.persona:
        err.print(
            f"[yellow]warning:[/yellow] conversation {session.id} keeps the persona it started with, "
            f"{session.conversation.persona}; --persona {_shown(persona)} applies to a new conversation",
            highlight=False,
        )
    return session


@app.command()
def ask(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question.")],
    scope: ScopeOption = [],  # noqa: B006
    category: CategoryOption = None,
    tag: TagOption = [],  # noqa: B006
    all_tags: AllTagsOption = [],  # noqa: B006
    content_type: TypeOption = [],  # noqa: B006
    meta: MetaOption = [],  # noqa: B006
    model: ModelOption = [],  # noqa: B006
    section: SectionOption = [],  # noqa: B006
    document: DocumentOption = [],  # noqa: B006
    persona: Annotated[
        str | None, typer.Option(help="general, clinical or repair (a new conversation's system prompt).")
    ] = None,
    conversation: Annotated[
        str | None, typer.Option("--conversation", "-c", help="Continue this conversation (its id).")
    ] = None,
    llm: Annotated[
        str | None, typer.Option(help="provider:model to answer with, e.g. extractive (CITELINE_LLM).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The answer and its citations as one JSON object.")
    ] = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", help="Also print the search's plan and stage timings, and the answer's stages."
        ),
    ] = False,
) -> None:
    """Answer a question from the documents, streamed, each claim citing a numbered source."""
    filters = _filters(scope, category, tag, all_tags, content_type, meta, model, section)
    with _citeline(ctx, **({"llm": llm} if llm else {})) as cl:
        filters = _with_documents(cl, filters, document)
        session = _conversation(cl, conversation, persona)
        _stream_answer(session, question, filters, as_json=as_json, explain=explain)
        if not as_json and conversation is None:
            err.print(f'[dim]follow up with: citeline ask --conversation {session.id} "..."[/dim]')


@app.command()
def chat(
    ctx: typer.Context,
    scope: ScopeOption = [],  # noqa: B006
    category: CategoryOption = None,
    tag: TagOption = [],  # noqa: B006
    all_tags: AllTagsOption = [],  # noqa: B006
    content_type: TypeOption = [],  # noqa: B006
    meta: MetaOption = [],  # noqa: B006
    model: ModelOption = [],  # noqa: B006
    section: SectionOption = [],  # noqa: B006
    document: DocumentOption = [],  # noqa: B006
    persona: Annotated[str | None, typer.Option(help="general, clinical or repair.")] = None,
    conversation: Annotated[
        str | None, typer.Option("--conversation", "-c", help="Continue this conversation (its id).")
    ] = None,
    llm: Annotated[str | None, typer.Option(help="provider:model to answer with (CITELINE_LLM).")] = None,
) -> None:
    """An interactive conversation: follow-up questions keep their context and citation numbers."""
    filters = _filters(scope, category, tag, all_tags, content_type, meta, model, section)
    with _citeline(ctx, **({"llm": llm} if llm else {})) as cl:
        filters = _with_documents(cl, filters, document)
        session = _conversation(cl, conversation, persona)
        err.print(f"[dim]conversation {session.id}; an empty line or Ctrl-D ends it[/dim]")
        while True:
            try:
                question = input("\n? ").strip()
            except (EOFError, KeyboardInterrupt):
                break
            if not question or question in {"/exit", "/quit"}:
                break
            _stream_answer(session, question, filters, as_json=False)
            if session.last_rewrite is not None and session.last_rewrite.query != question:
                err.print(f"[dim]searched for: {_shown(session.last_rewrite.query)}[/dim]", highlight=False)


def _print_table(table: Table) -> None:
    """``table`` on standard output: fitted to a terminal's width, its long cells folded; piped or
    redirected, each row on one line (Rich would fold it into 80 columns, and `docs list | grep` would
    find pieces of names). A width set in COLUMNS is kept."""
    if console.is_terminal or "COLUMNS" in os.environ:
        console.print(table)
    else:  # a console of its own: print(width=...) can only narrow the console's
        Console(soft_wrap=True, emoji=False, width=_UNFOLDED_WIDTH).print(table)


def _fitted_table(
    headers: Sequence[str], rows: Sequence[Sequence[Text]], cut: Mapping[str, tuple[int, int]]
) -> Table:
    """A table of one line per row. In a terminal (or COLUMNS columns) it fits the width: the columns
    in ``cut`` share what the others leave by their weight (``cut[h][0]``), and a cell longer than its
    share ends in an ellipsis. Piped or redirected, each row keeps its natural width, for grep, but a
    cell beyond ``cut[h][1]`` characters ends in one too. The whole values are in --json.

    Folded, a 250-character name or a long failure message made a row a paragraph, and piped, a row
    hundreds of columns wide; Rich, asked to narrow columns that may not wrap, drops whole columns
    (the id among them) rather than cut their cells, so the widths are set here."""
    natural = {h: max([cell_len(h)] + [row[i].cell_len for row in rows]) for i, h in enumerate(headers)}
    if console.is_terminal or "COLUMNS" in os.environ:
        # Two spaces between columns, one at each edge (box.SIMPLE_HEAD, collapsed padding).
        room = console.width - sum(natural[h] for h in headers if h not in cut) - 2 * len(headers)
        share = _shares(natural, {h: weight for h, (weight, _) in cut.items()}, room)
    else:
        share = {h: min(natural[h], piped) for h, (_, piped) in cut.items()}
    table = Table(
        *(
            Column(h, no_wrap=True, overflow="ellipsis", max_width=share[h])
            if h in cut
            else Column(h, no_wrap=True)
            for h in headers
        ),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for row in rows:
        table.add_row(*row)
    return table


def _shares(natural: Mapping[str, int], weights: Mapping[str, int], room: int) -> dict[str, int]:
    """The widths of columns sharing ``room`` by their weights: one narrower than its share keeps its
    natural width and leaves the rest to the others; failing any, one whose share is narrower than its
    header gets the header's width."""
    share: dict[str, int] = {}
    weights = dict(weights)
    while weights:
        left = room - sum(share.values())
        fair = {h: left * w // sum(weights.values()) for h, w in weights.items()}
        settled = {h: natural[h] for h in weights if natural[h] <= fair[h]} or {
            h: cell_len(h) for h in weights if cell_len(h) > fair[h]
        }
        if not settled:
            return share | fair
        share |= settled
        weights = {h: w for h, w in weights.items() if h not in settled}
    return share


@docs_app.command("list")
def docs_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False
) -> None:
    """Every document version: active, failed and in progress."""
    with _citeline(ctx) as cl:
        docs = cl.documents()
    if as_json:
        _print_json([d.as_dict() for d in docs])
        return
    # The id's first 8 characters are what `docs show` and `docs delete` take, so they are never cut;
    # each document is one line, its long names, labels and failures cut to fit. Every cell from a
    # document is text, not markup.
    rows = []
    for d in docs:
        status = Text(d.status + ("" if d.is_active or d.status != "completed" else " (inactive)"))
        if d.status == "failed":
            status = Text.assemble(("failed", "red"), ": " + printable(d.error or ""))
        rows.append(
            [
                Text(str(d.id)[:8]),
                Text(printable(d.name)),
                Text(str(d.version)),
                status,
                Text(str(d.vector_count)),
                Text(short_type(d.content_type)),
                Text(printable(",".join(d.scopes) or "(universal)")),
                Text(printable(d.category or "")),
                Text(printable(",".join(d.tags))),
            ]
        )
    headers = ("id", "name", "v", "status", "chunks", "type", "scopes", "category", "tags")
    cut = {"name": (3, 100), "status": (3, 80), "scopes": (1, 40), "category": (1, 40), "tags": (1, 40)}
    _print_table(_fitted_table(headers, rows, cut))


@app.command()
def builds(
    ctx: typer.Context,
    failed_within: Annotated[
        str | None,
        typer.Option("--failed-within", help="Also the builds that failed this recently: 30m, 12h, 1d, 2w."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False,
) -> None:
    """Versions queued or being built, whoever started them (the API, this command line, a worker):
    running ones first, then the queue in the order runners take it."""
    age = _age("--failed-within", failed_within)
    with _citeline(ctx) as cl:
        found = cl.builds(failed_within=age).builds
    if as_json:
        _print_json([b.as_dict() for b in found])
        return
    if not found:
        err.print("no builds queued or running" + (f", none failed within {failed_within}" if age else ""))
        return
    # As `docs list`: the id's first 8 characters are what other commands take; cells are text.
    table = Table(
        Column("id", no_wrap=True),
        Column("name", overflow="fold", ratio=2, min_width=12),
        Column("v", no_wrap=True),
        Column("serving", no_wrap=True),
        Column("status", overflow="fold", ratio=1, min_width=10),
        Column("attempts", no_wrap=True),
        Column("since", no_wrap=True),
        Column("error", overflow="fold", ratio=2, min_width=9),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for b in found:
        since = b.finished_at if b.status == "failed" else (b.started_at or b.queued_at)
        status = Text(b.status + (" (cancelling)" if b.cancel_requested else ""))
        if b.migration:  # a twin for the model migration, not a new version of what serves
            status.append(f" (migration to {b.embedding_model})")
        if b.status == "failed":
            status.stylize("red")
        table.add_row(
            str(b.document_id)[:8],
            Text(printable(b.name)),
            str(b.version),
            "" if b.current_version is None else str(b.current_version),
            status,
            str(b.attempts),
            since.astimezone().strftime("%Y-%m-%d %H:%M:%S") if since else "",
            Text(printable(b.error or "")),
        )
    _print_table(table)
    err.print(counted(len(found), "build"))


def _cli_user() -> str:
    """Who ingests from this command line, as a version's ``uploaded_by`` records it (an API key's is
    ``key:<id>``): ``cli:<login name>``, or ``cli`` where the system knows no name for the user."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no name in the environment (LOGNAME, USER...) nor the password database
        return "cli"


@docs_app.command("show")
def docs_show(
    ctx: typer.Context,
    doc_id: Annotated[str, typer.Argument(help="Document id (or a unique prefix).")],
    chunks: Annotated[bool, typer.Option(help="Also print the chunks.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False,
) -> None:
    """One document's catalog entry."""
    with _citeline(ctx) as cl:
        doc = cl.document(doc_id)
        rows = cl.chunks(doc) if chunks else []
    data = doc.as_dict()
    if as_json:
        if chunks:
            data["chunks"] = rows
        _print_json(data)
        return
    for key, value in data.items():
        console.print(f"[bold]{key:>16}[/bold]  {_shown(str(value))}", highlight=False)
    for row in rows:
        console.print(
            f"\n[bold]#{row['chunk_index']}[/bold] {_place(row['page'], row['rows'])} "
            f"chars {row['start_offset']}-{row['end_offset']}"
            + (f" § {_shown(row['section'])}" if row["section"] else "")
            + (f" \\[{row['section_type']}]" if row["section_type"] else "")
            + (f" models {_shown(', '.join(row['model_numbers']))}" if row["model_numbers"] else ""),
            highlight=False,
        )
        console.print(row["text"], markup=False, highlight=False)


@docs_app.command("delete")
def docs_delete(
    ctx: typer.Context,
    doc_id: Annotated[str, typer.Argument(help="Document id (or a unique prefix).")],
) -> None:
    """Delete a document: all its versions, chunks, vectors, keyword entries and stored file."""
    with _citeline(ctx) as cl:
        removed = cl.delete(doc_id)
    console.print(f"deleted {_shown(removed[0].name)} ({counted(len(removed), 'version')})", highlight=False)


@app.command()
def reingest(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be done; change nothing.")
    ] = False,
    cleanup: Annotated[
        bool, typer.Option("--cleanup", help="Then remove stored originals no version refers to any more.")
    ] = False,
    document_id: Annotated[
        list[str], typer.Option("--document-id", help="Only this document (id or prefix); repeatable.")
    ] = [],  # noqa: B006  (typer reads the default; it is never mutated)
    status: Annotated[
        Status, typer.Option(help="Re-ingest the documents whose current version has this status.")
    ] = Status.COMPLETED,
    sync: Annotated[
        bool, typer.Option("--sync", help="Build in this process and wait, even with Celery workers.")
    ] = False,
    check_with: CheckWithOption = None,
    force: ForceOption = False,
) -> None:
    """Build a new version of documents from their stored originals, with the current model and chunking.

    With the thread runner (or --sync) the documents are built here and the command waits for them;
    with CITELINE_JOB_RUNNER=celery they are queued for `citeline worker` and the command returns.

    When CITELINE_EMBEDDING_MODEL differs from the model the namespace serves, this migrates: every
    document gets a version embedded by the new model, staged while searches go on with the old one;
    once all are built (here, or later with `citeline migrate --switch`) a quality check runs and the
    namespace switches, all at once, if it passes or with --force.
    """
    with _citeline(ctx, **({"job_runner": "thread"} if sync else {})) as cl:
        if cl.served_model(refresh=True) != cl.settings.embedding_model:
            if status != Status.COMPLETED or cleanup:
                err.print(
                    "[red]error:[/red] --status and --cleanup do not apply to a change of embedding model "
                    f"(CITELINE_EMBEDDING_MODEL {cl.settings.embedding_model} is not the model this "
                    f"namespace serves, {cl.served_model()}): every active document is migrated"
                )
                raise typer.Exit(2)
            _migrate_by_reingest(cl, dry_run, document_id, check_with, force)
            return
        docs = cl.reingest_candidates(status=status.value, document_ids=document_id)
        if dry_run:
            for doc in docs:
                console.print(
                    f"would re-ingest {str(doc.id)[:8]} {_shown(doc.name)} (v{doc.version}, {doc.status})",
                    highlight=False,
                )
            for path in cl.unused_files() if cleanup else []:
                console.print(f"would remove {_shown(str(path))}", highlight=False)
            err.print(f"{len(docs)} document{'s' if len(docs) != 1 else ''} to re-ingest (dry run)")
            return
        here = cl.settings.job_runner == "thread"
        if here:
            cl.start_jobs()
        queued, failed = [], 0
        for doc in docs:
            try:
                queued.append(cl.reingest(doc.id))
            except CitelineError as exc:
                err.print(f"[red]failed[/red]     {_shown(doc.name)}: {_shown(str(exc))}", highlight=False)
                failed += 1
        if here:
            for submission in queued:
                # What became of the version this command queued, not the document's active version:
                # when the new version fails, the old one is still active and completed.
                result = cl.refreshed(submission, timeout=float("inf"))
                done = result.document
                if result.outcome == Outcome.FAILED:
                    err.print(f"[red]failed[/red]     {_shown(done.name)}: {_shown(result.error or '')}")
                    failed += 1
                elif result.outcome == Outcome.UPDATED:
                    console.print(
                        f"reingested {_shown(done.name)}: v{done.version}, "
                        f"{counted(done.vector_count, 'chunk')}",
                        highlight=False,
                    )
                else:  # replaced meanwhile by a newer version from elsewhere
                    console.print(f"{result.outcome!s:<10} {_shown(done.name)}", highlight=False)
        else:
            plural = "s" if len(queued) != 1 else ""
            console.print(f"queued {len(queued)} document{plural} for citeline worker")
        for path in cl.remove_unused_files() if cleanup else []:
            console.print(f"removed {_shown(str(path))}", highlight=False)
    if failed:
        raise typer.Exit(65)


CheckWithOption = Annotated[
    Path | None,
    typer.Option(
        "--check-with",
        help="Gold questions for the quality check before a model switch: a BEIR folder, or a JSONL file "
        'of {"question": ..., "relevant": \\[document names]}. Unset: overlap of old and new top-10.',
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Switch to the new model even if the quality check does not pass.")
]


def _migration_line(status: MigrationStatus) -> str:
    return "embedding-model migration under way: " + _migration_progress(status)


def _migration_progress(status: MigrationStatus) -> str:
    """The models and how far the migration is, as ``search`` and ``migrate`` say it and ``stats``
    shows it: ``onnx:a -> onnx:b, 12/22 documents built (2 building); searches use onnx:a``."""
    m, p = status.migration, status.progress
    line = f"{m.source_model} -> {m.target_model}, {p.done}/{p.total} documents built"
    extra = [f"{p.building} building"] if p.building else []
    extra += [f"{p.failed} failed"] if p.failed else []
    return line + (f" ({', '.join(extra)})" if extra else "") + "; searches use " + m.source_model


def _print_check(result: CheckResult) -> None:
    if result.method == "ndcg@10":
        from citeline.eval.report import DISAGREE_MARK, DISAGREE_NOTE, marked
        from citeline.eval.stats import interval_text

        assert result.old is not None and result.delta is not None and result.delta_ci is not None
        assert result.p_value is not None and result.verdict is not None
        # In the form of citeline eval's paired table (_paired_table), so both read alike.
        console.print(
            f"quality check on {result.queries} gold questions ({result.gold}): "
            f"nDCG@10 old {result.old:.4f}, new {result.new:.4f}, Δ new - old {result.delta:+.4f} "
            f"({interval_text(result.delta_ci)}), p {_p_value(result.p_value)}, {marked(result.verdict)}",
            highlight=False,
            markup=False,
        )
        if result.verdict == "disagree":
            console.print(f"{DISAGREE_MARK} {DISAGREE_NOTE}", highlight=False)
        dropped = list(result.extra.get("dropped", []))
        if dropped:
            shown = "; ".join(repr(q) for q in dropped[:3]) + (" ..." if len(dropped) > 3 else "")
            err.print(
                f"[yellow]warning:[/yellow] {len(dropped)} of {result.extra['questions_given']} gold "
                f"questions name no document of this namespace and were not scored: {_shown(shown)}"
            )
    else:
        console.print(
            f"quality check on {result.queries} of the namespace's chunks as queries: old and new top-10 "
            f"share {result.new:.0%} [{result.new_ci[0]:.0%}, {result.new_ci[1]:.0%}]",
            highlight=False,
        )
    verdict = "[green]passed[/green]" if result.passed else "[red]did not pass[/red]"
    console.print(f"{verdict}: {_shown(result.rule)}")


def _check_and_switch(cl: Citeline, check_with: Path | None, force: bool) -> bool:
    """Run the check, switch if it passes or ``force``; whether the namespace switched."""
    result, switched = cl.switch_model(gold=check_with, force=force)
    _print_check(result)
    if switched:
        forced = " (forced)" if not result.passed else ""
        console.print(f"switched{forced}: the namespace now serves {cl.served_model()}", highlight=False)
    else:
        err.print(
            "not switched: searches keep the old model; --force switches anyway, "
            "citeline migrate --abort discards the new versions"
        )
    return switched


def _migrate_by_reingest(
    cl: Citeline, dry_run: bool, document_ids: list[str], check_with: Path | None, force: bool
) -> None:
    """``citeline reingest`` when the configured model is not the one the namespace serves."""
    served, target = cl.served_model(), cl.settings.embedding_model
    ids = [cl.document(ref).id for ref in document_ids]
    if dry_run:
        # What the real run would queue: a resumed migration builds only what is missing.
        docs = _guard(lambda: cl.migration_plan(document_ids=ids))
        for doc in docs:
            console.print(
                f"would embed {str(doc.id)[:8]} {_shown(doc.name)} (v{doc.version}) with {target}",
                highlight=False,
            )
        plural = "s" if len(docs) != 1 else ""
        err.print(f"{len(docs)} document{plural} to migrate from {served} to {target} (dry run)")
        return
    here = cl.settings.job_runner == "thread"
    migration, queued = _guard(lambda: cl.start_migration(document_ids=ids))
    if here:  # once the new model has loaded: a runner started before would log its failure to load
        cl.start_jobs()
    console.print(
        f"migrating from {migration.source_model} to {migration.target_model}: {len(queued)} "
        f"document{'s' if len(queued) != 1 else ''} queued; searches keep the old model until the switch",
        highlight=False,
    )
    if not here:
        console.print("citeline worker builds them; then run: citeline migrate --switch", highlight=False)
        return
    shown = ""
    while (status := cl.migration(max_age=0.0)) is not None and status.progress.building:
        # Printed when it changes: one long document held a line repeated every poll.
        if (line := _migration_line(status)) != shown:
            err.print(line, highlight=False)
            shown = line
        time.sleep(2.0)
    if status is None:  # another process ended it
        if cl.served_model(refresh=True) == target:
            console.print(f"switched by another process: the namespace now serves {target}", highlight=False)
            return
        err.print("[red]the migration was aborted meanwhile[/red]")
        raise typer.Exit(1)
    if status.progress.done < status.progress.total:
        err.print(_migration_line(status), highlight=False)
        failures = cl.migration_failures()
        for doc in failures:
            err.print(f"[red]failed[/red]     {_shown(doc.name)}: {_shown(doc.error or '')}")
        if failures:
            raise typer.Exit(65)
        # Only the documents named were asked for (or some were added meanwhile): nothing failed.
        missing = status.progress.total - status.progress.done
        err.print(
            f"not switched: {missing} document{'s have' if missing != 1 else ' has'} no version embedded "
            f"by {target} yet; citeline reingest (without --document-id) builds them, then switches"
        )
        if not document_ids:
            raise typer.Exit(1)
        return
    if not _guard(lambda: _check_and_switch(cl, check_with, force)):
        raise typer.Exit(1)


@app.command()
def migrate(
    ctx: typer.Context,
    switch: Annotated[
        bool, typer.Option("--switch", help="Run the quality check, then switch if it passes (or --force).")
    ] = False,
    check: Annotated[bool, typer.Option("--check", help="Run the quality check only.")] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Stop the migration and discard the new model's versions.")
    ] = False,
    check_with: CheckWithOption = None,
    force: ForceOption = False,
    as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False,
) -> None:
    """Show, check, switch or abort the change of embedding model under way (see citeline reingest).

    With no option: the model served, the model configured and the migration's progress.
    """
    if sum((switch, check, abort)) > 1:
        err.print("[red]error:[/red] choose one of --switch, --check and --abort")
        raise typer.Exit(2)
    with _citeline(ctx) as cl:
        if abort:
            migration, discarded = _guard(cl.abort_migration)
            console.print(
                f"aborted the migration to {migration.target_model}: {discarded} of its versions "
                f"discarded; the namespace serves {cl.served_model(refresh=True)}",
                highlight=False,
            )
            return
        if check:
            result = _guard(lambda: cl.check_migration(check_with))
            if as_json:
                _print_json(result.as_dict())
            else:
                _print_check(result)
            return
        if switch:
            if not _guard(lambda: _check_and_switch(cl, check_with, force)):
                raise typer.Exit(1)
            return
        status = cl.migration(max_age=0.0)
        data = {
            "served_model": cl.served_model(refresh=True),
            "configured_model": cl.settings.embedding_model,
            "migration": status.as_dict() if status else None,
        }
    if as_json:
        _print_json(data)
        return
    console.print(f"serves     {data['served_model']}", highlight=False)
    console.print(f"configured {data['configured_model']}", highlight=False)
    if status is None:
        differs = data["served_model"] != data["configured_model"]
        hint = " (run citeline reingest to migrate)" if differs else ""
        console.print("no migration under way" + hint, highlight=False)
    else:
        console.print(_migration_line(status), highlight=False)
        if status.migration.check_result:
            last = json.dumps(status.migration.check_result)
            console.print(f"last check: {last}", highlight=False, markup=False)


@app.command()
def refresh(
    ctx: typer.Context,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Only sources last read longer ago than this: 30m, 12h, 1d, 2w."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be read again; change nothing.")
    ] = False,
    document_id: Annotated[
        list[str], typer.Option("--document-id", help="Only this document (id or prefix); repeatable.")
    ] = [],  # noqa: B006  (typer reads the default; it is never mutated)
    sync: Annotated[
        bool, typer.Option("--sync", help="Build in this process and wait, even with Celery workers.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per document.")] = False,
) -> None:
    """Read web pages and files again at their origin; a new version only for changed content.

    Web pages are compared by their extracted text, files by their bytes; a source that cannot be read
    keeps its current version. With the thread runner (or --sync) the command waits for the new
    versions; with CITELINE_JOB_RUNNER=celery, web pages are queued for `citeline worker`.
    """
    age = _age("--older-than", older_than)
    with _citeline(ctx, **({"job_runner": "thread"} if sync else {})) as cl:
        docs = cl.refresh_candidates(older_than=age, document_ids=document_id)
        if dry_run:
            refusals = {doc.id: cl.refresh_problem(doc) for doc in docs}
            for doc in docs:
                problem = refusals[doc.id]
                if problem is not None:
                    console.print(f"cannot refresh {str(doc.id)[:8]} {_shown(doc.name)}: {_shown(problem)}")
                    continue
                read = doc.last_fetched_at.isoformat(timespec="seconds") if doc.last_fetched_at else "never"
                console.print(
                    f"would refresh {str(doc.id)[:8]} {_shown(doc.name)} ({_shown(doc.source_uri)}, "
                    f"last read {read})",
                    highlight=False,
                )
            ready = sum(problem is None for problem in refusals.values())
            err.print(f"{ready} document{'s' if ready != 1 else ''} to refresh (dry run)")
            return
        here = cl.settings.job_runner == "thread"
        if here:
            cl.start_jobs()
        outcomes: list[str] = []

        def report(result: Refreshed) -> None:
            outcomes.append(str(result.outcome))
            if as_json:
                _print_json(result.as_dict())
            elif result.outcome == Outcome.FAILED:
                name, error = _shown(result.document.name), _shown(result.error or "")
                err.print(f"[red]failed[/red]     {name}: {error}")
            elif result.outcome == Outcome.UPDATED:
                doc = result.document
                console.print(f"updated    {_shown(doc.name)}: v{doc.version}, {doc.vector_count} chunks")
            else:
                console.print(f"{result.outcome!s:<10} {_shown(result.document.name)}", highlight=False)

        queued = []
        for doc in docs:
            try:
                submission = cl.refresh(doc.id)
            except CitelineError as exc:
                report(Refreshed(doc, Outcome.FAILED, str(exc)))
                continue
            if not submission.created:
                report(cl.refreshed(submission))
            elif here:
                queued.append(submission)
            else:  # a worker elsewhere fetches it
                report(Refreshed(submission.document, Status.QUEUED))
        for submission in queued:
            report(cl.refreshed(submission, timeout=float("inf")))
    if not as_json:
        counts = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
        summary = ", ".join(f"{n} {o}" for o, n in counts.items()) or "nothing to refresh"
        err.print(f"{len(outcomes)} document{'s' if len(outcomes) != 1 else ''}: {summary}")
    if Outcome.FAILED.value in outcomes:
        raise typer.Exit(65)


@app.command()
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Documents built at once (worker processes).")
    ] = 1,
) -> None:
    """Build queued documents as a Celery worker, with Redis (CITELINE_REDIS_URL) as the broker.

    Run any number of workers, on any machines that reach the same PostgreSQL and Redis; the API and
    the CLI queue documents for them when CITELINE_JOB_RUNNER=celery.
    """
    settings = _settings(ctx)
    from citeline.jobs.celery import run_worker  # Celery is loaded only by the commands that use it

    _guard(lambda: run_worker(settings, concurrency=concurrency))


@app.command()
def stats(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False
) -> None:
    """Counts over the namespace: documents by status and type, chunks, postings, size; with Celery
    workers, the broker queue this deployment's documents are sent to."""
    with _citeline(ctx) as cl:
        data = cl.stats()
        # The status stats() has just read (kept a moment), as a MigrationStatus for the line
        # `citeline search` prints rather than its JSON form's fields.
        migration = cl.migration() if "migration" in data else None
    if as_json:
        _print_json(data)
        return
    for key, value in data.items():
        text = _migration_progress(migration) if key == "migration" and migration else _plain(value)
        console.print(f"[bold]{key:>20}[/bold]  {_shown(text)}", highlight=False)


def _plain(value: object) -> str:
    """A statistic as a person reads it: ``completed 11, failed 1`` rather than a dict's repr, ``86.5``
    rather than ``86.48760330578513``."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_plain(v)}" for k, v in value.items()) or "none"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _holding(manifest: Manifest) -> str:
    n = counted
    return (
        f"{n(manifest.documents, 'document')} ({n(manifest.versions, 'version')}, "
        f"{n(manifest.chunks, 'chunk')}), {n(manifest.keys, 'API key')}, "
        f"{n(manifest.conversations, 'conversation')}, {n(manifest.files, 'stored original')}"
    )


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """For a command whose clean-up must run when it is stopped (backup, restore): SIGTERM (a
    service manager, ``timeout``) exits as Ctrl-C does, through the clean-up that leaves no partial
    file, temporary folder, half-restored namespace or ``pg_dump`` behind, instead of ending the
    process where it stands. A shell concern: the library's callers install their own handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _backup_file(command: str, name: str) -> Path:
    """The backup file named; an empty name is refused (a path would read it as the current folder)."""
    if not name.strip():
        err.print(f"[red]error:[/red] {command}: the backup file name is empty", highlight=False)
        raise typer.Exit(2)
    return Path(name)


@app.command()
def backup(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="The backup file to write (must not exist).")],
    as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False,
) -> None:
    """Back up the namespace into one file, consistent while citeline keeps serving.

    The file holds documents with every version, vectors, keywords, conversations, API keys and the
    stored originals."""
    from citeline.store.backup import backup as write_backup

    path = _backup_file("backup", file)
    with exit_on_sigterm():
        result = _guard(lambda: write_backup(_settings(ctx), path))
    manifest = result.manifest
    if as_json:
        _print_json({"path": str(result.path), "bytes": result.bytes, **asdict(manifest)})
        return
    console.print(
        f"backed up namespace {manifest.namespace} to {_shown(str(result.path))} "
        f"({result.bytes / 1e6:.1f} MB): {_holding(manifest)}",
        highlight=False,
    )
    for missing in manifest.missing_files:
        err.print(
            f"[yellow]warning:[/yellow] stored original {_shown(missing)} was gone "
            "(its document deleted since the snapshot?)"
        )


@app.command()
def restore(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A file written by `citeline backup`.")],
    as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False,
) -> None:
    """Restore a backup file into the namespace (--namespace), which must be empty.

    Into a new data directory or database, under the backup's namespace name, or under another name
    where the backup's own is free."""
    from citeline.store.backup import restore as read_backup

    path = _backup_file("restore", file)
    with exit_on_sigterm():
        result = _guard(lambda: read_backup(_settings(ctx), path))
    manifest = result.manifest
    if as_json:
        _print_json(
            {
                "path": str(result.path),
                "restored_into": result.namespace,
                "files_added": result.files_added,
                **asdict(manifest),
            }
        )
        return
    console.print(
        f"restored {_shown(str(result.path))} (namespace {manifest.namespace}, {manifest.created_at}, "
        f"citeline {manifest.citeline_version}) into namespace {result.namespace}: {_holding(manifest)}",
        highlight=False,
    )


@app.command()
def providers(as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False) -> None:
    """The providers each provider:model setting can name: embedding models, answering models, rerankers."""
    from citeline.answer.llm import LLMS
    from citeline.embed import EMBEDDERS
    from citeline.retrieve.rerank import RERANKERS

    rows = [
        {
            "setting": setting,
            "provider": provider.usage,
            "about": provider.about,
            "example": provider.example,
            "extra": provider.extra,
        }
        for setting, registry in (
            ("CITELINE_EMBEDDING_MODEL", EMBEDDERS),
            ("CITELINE_LLM", LLMS),
            ("CITELINE_RERANKER", RERANKERS),
        )
        for provider in registry.providers()
    ]
    if as_json:
        _print_json(rows)
        return
    setting = ""
    for row in rows:
        if row["setting"] != setting:
            setting = str(row["setting"])
            console.print(Text(setting, style="bold"))
        install = f"; pip install 'citeline[{row['extra']}]'" if row["extra"] else ""
        console.print(Text(f"  {row['provider']:<32} {row['about']}, e.g. {row['example']}{install}"))


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv.")],
    split_name: Annotated[str, typer.Option("--split", help="qrels file name without .tsv.")] = "test",
    limit: Annotated[int | None, typer.Option(help="Only the first N queries.")] = None,
    fusion: Annotated[
        Fusion | None, typer.Option(help="Fusion mode of the current settings (the `default` configuration).")
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            help="Configurations to compare, comma-separated: built-in names (default, rrf, weighted, dense, "
            "keyword, ...) or name=key:value;key:value. Default: the current settings."
        ),
    ] = None,
    folds: Annotated[
        int | None,
        typer.Option(
            help="With --compare: K-fold cross-validation over the queries of picking the configuration "
            "with the best nDCG@10 (picked on K-1 folds, scored on the one left out).",
        ),
    ] = None,
    shuffles: Annotated[
        int | None,
        typer.Option(
            help="With --folds: deal the queries into folds this many times (seeds 0 to N-1) and say how "
            f"often choosing beat keeping the first configuration. [default: {SHUFFLES}]",
            show_default=False,
        ),
    ] = None,
    per_query: Annotated[
        Path | None, typer.Option(help="Write one JSON line per query and configuration to this file.")
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="Write a self-contained HTML report to this file.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON line of metrics.")] = False,
    answers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Evaluate answers instead of retrieval: ask the first N claims (qrels order) as questions "
            "and check their citations.",
        ),
    ] = None,
    answers_skip: Annotated[
        int,
        typer.Option(
            min=0,
            help="With --answers: skip the first N claims (qrels order) before taking the sample, "
            "to ask claims held out from tuning.",
        ),
    ] = 0,
    llm: Annotated[
        str | None, typer.Option(help="With --answers: provider:model that answers (CITELINE_LLM).")
    ] = None,
) -> None:
    """Evaluate retrieval on a BEIR-format folder: nDCG@10, recall@10/100, MRR@10, latency p50/p99.

    Each configuration's nDCG@10 comes with a 95% bootstrap interval and, against the first
    configuration, a paired difference with its interval and p-value.
    With --answers, evaluate answers: citations resolved, gold abstract cited, time to first token.
    """
    from citeline.eval.beir import check_limit, evaluate, judgement_warnings, load_beir
    from citeline.eval.configs import parse_configs
    from citeline.eval.report import check_writable, write_per_query, write_report
    from citeline.eval.stats import check_folds, check_shuffles

    _guard(partial(check_limit, limit))
    data = _guard(lambda: load_beir(folder, split=split_name))
    # Reads the whole corpus once, so a malformed line stops the command before the store opens.
    for note in _guard(lambda: judgement_warnings(data)):
        err.print(f"warning: {note}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    for path in (per_query, report):
        if path is not None:
            _guard(partial(check_writable, path))
    # A BEIR corpus gets its own namespace unless one was named, so it never mixes with real documents.
    more: dict[str, Any] = {"namespace": (ctx.obj or {}).get("namespace", data.namespace)}
    if fusion is not None:
        more["fusion"] = fusion
    if answers is not None or llm is not None:
        given = {
            "--compare": compare,
            "--report": report,
            "--limit": limit,
            "--folds": folds,
            "--shuffles": shuffles,
        }
        _eval_answers(ctx, data, more, answers, answers_skip, llm, per_query, as_json, given)
        return
    settings = _settings(ctx, **more)
    # Checked before the store opens, so a mistyped name costs no ingest; no --compare: the settings as set.
    configs = _guard(lambda: parse_configs(compare, settings)) if compare else None
    if shuffles is not None and folds is None:
        # Default None, not SHUFFLES, so that even "--shuffles 20" alone is seen and refused.
        err.print("[red]error:[/red] --shuffles repeats the cross-validation of --folds; give --folds K too")
        raise typer.Exit(2)
    shuffles = SHUFFLES if shuffles is None else shuffles
    if folds is not None:
        if configs is None:
            err.print("[red]error:[/red] --folds cross-validates the configurations of --compare; name them")
            raise typer.Exit(2)
        queries = min(limit, len(data.queries)) if limit is not None else len(data.queries)
        _guard(partial(check_folds, folds, queries))
        _guard(partial(check_shuffles, shuffles))
    with _creating(ctx, **more) as cl:
        evaluation = evaluate(cl, data, configs, limit=limit, folds=folds, shuffles=shuffles, console=err)
        if per_query is not None:
            write_per_query(evaluation, per_query)
        if report is not None:
            write_report(evaluation, report)
    summary = evaluation.summary()
    out = err if as_json else console
    out.print(
        f"{summary['dataset']}: {summary['queries']} quer{'y' if summary['queries'] == 1 else 'ies'} in "
        f"namespace {summary['namespace']}; corpus "
        f"{summary['corpus_added']} ingested, {summary['corpus_unchanged']} unchanged "
        f"({summary['ingest_seconds']} s)",
        markup=False,
        highlight=False,
    )
    out.print(_metrics_table(summary))
    out.print(_spread_table(summary))
    paired = _paired_table(summary)
    if paired is not None:
        out.print(paired)
    if "cross_validation" in summary:
        out.print(_cross_validation_table(summary["cross_validation"]))
    for path, what in ((per_query, "per-query results"), (report, "report")):
        if path is not None:
            err.print(f"{what} written to {path}", markup=False, highlight=False)
    if as_json:
        _print_json(summary)


def _metrics_table(summary: Mapping[str, Any]) -> Table:
    """One row per configuration: the ranking metrics and the latencies."""
    from citeline.eval.beir import METRICS

    table = Table(Column("config", no_wrap=True), "nDCG@10", "R@10", "R@100", "MRR@10", "p50 ms", "p99 ms")
    for name, figures in summary["configs"].items():
        table.add_row(
            Text(name),
            *(f"{figures[k]:.1f}" if k.startswith("latency") else f"{figures[k]:.4f}" for k in METRICS),
        )
    return table


def _spread_table(summary: Mapping[str, Any]) -> Table:
    """nDCG@10 with its bootstrap interval, one row per configuration."""
    table = Table(
        Column("config", no_wrap=True),
        "nDCG@10",
        Column("95% CI", no_wrap=True),
        title="nDCG@10 with 95% bootstrap intervals",
    )
    for name, figures in summary["configs"].items():
        ci = figures.get("ndcg@10_ci")
        table.add_row(Text(name), f"{figures['ndcg@10']:.4f}", f"{ci[0]:.3f} to {ci[1]:.3f}" if ci else "")
    return table


def _paired_table(summary: Mapping[str, Any]) -> Table | None:
    """Each configuration's paired difference with the first, its interval, p-value and verdict; None
    for a single configuration. A table of its own, so it fits a terminal's 80 columns."""
    from citeline.eval.report import DISAGREE_MARK, DISAGREE_NOTE, marked
    from citeline.eval.stats import interval_text

    configs = summary["configs"]
    first = next(iter(configs))
    rows = [(name, figures) for name, figures in configs.items() if figures.get("delta_vs_first") is not None]
    if not rows:
        return None
    table = Table(
        Column("config", no_wrap=True),
        Column("Δ", no_wrap=True),
        Column("Δ 95% CI", no_wrap=True),
        Column("p", no_wrap=True),
        Column("verdict", no_wrap=True),
        title=f"nDCG@10: Δ and p paired against {first}",
    )
    disagree = False
    for name, figures in rows:
        verdict = figures["verdict_vs_first"]
        disagree |= verdict == "disagree"
        table.add_row(
            Text(name),
            f"{figures['delta_vs_first']:+.4f}",
            interval_text(figures["delta_vs_first_ci"]),
            _p_value(figures["p_vs_first"]),
            marked(verdict),
        )
    if disagree:
        table.caption = Text(f"{DISAGREE_MARK} {DISAGREE_NOTE}")
    return table


def _p_value(p: float) -> str:
    # Below 0.001 the randomisation test's resolution (1/10,000 draws) makes more digits meaningless.
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _cross_validation_table(cv: Mapping[str, Any]) -> Table:
    """Each fold's pick and held-out nDCG@10, with the held-out mean and the in-sample best below."""
    table = Table(
        "fold",
        "queries",
        Column("picked on the other folds", no_wrap=True),
        "held-out nDCG@10",
        title=f"{cv['folds']}-fold cross-validation (seed {cv['seed']})",
    )
    for fold in cv["per_fold"]:
        table.add_row(
            str(fold["fold"] + 1), str(fold["queries"]), Text(fold["picked"]), f"{fold['ndcg@10']:.4f}"
        )
    picks = ", ".join(f"{name} {count}/{cv['folds']}" for name, count in cv["picks"].items())
    caption = (
        f"held-out nDCG@10 {cv['held_out_ndcg@10']:.4f}; picked: {picks}; "
        f"best on all queries: {cv['best_in_sample']} {cv['best_in_sample_ndcg@10']:.4f}"
    )
    if "shuffles" in cv:
        caption += "\n" + _shuffles_line(cv["shuffles"])
    table.caption = Text(caption)
    return table


def _shuffles_line(shuffles: Mapping[str, Any]) -> str:
    """Repeated cross-validation in one line: how often, and by how much, choosing beat keeping the first."""
    from citeline.eval.stats import interval_text

    low, high = shuffles["held_out_ndcg@10_range"]
    return (
        f"over {shuffles['count']} deals of the folds: held-out nDCG@10 {shuffles['held_out_ndcg@10']:.4f} "
        f"({low:.4f} to {high:.4f}), above keeping {shuffles['first']} in {shuffles['above_first']} of "
        f"{shuffles['count']}; choosing against keeping {shuffles['first']}: "
        f"Δ {shuffles['delta_vs_first']:+.4f} ({interval_text(shuffles['delta_vs_first_ci'])}), "
        f"{shuffles['verdict_vs_first']}"
    )


def _eval_answers(
    ctx: typer.Context,
    data: BeirData,
    more: dict[str, Any],
    answers: int | None,
    skip: int,
    llm: str | None,
    per_query: Path | None,
    as_json: bool,
    retrieval_options: Mapping[str, object],
) -> None:
    """``eval --answers``: the answer evaluation of :mod:`citeline.eval.answers`."""
    from citeline.eval.answers import evaluate_answers, summary_table, write_per_claim

    if answers is None:
        err.print("[red]error:[/red] --llm applies to --answers only")
        raise typer.Exit(2)
    conflicting = [name for name, value in retrieval_options.items() if value is not None]
    if conflicting:
        err.print(f"[red]error:[/red] --answers cannot be combined with {', '.join(conflicting)}")
        raise typer.Exit(2)
    if llm is not None:
        more = {**more, "llm": llm}
    with _creating(ctx, **more) as cl:
        evaluation = evaluate_answers(cl, data, sample=answers, skip=skip, console=err)
        if per_query is not None:
            write_per_claim(evaluation, per_query)
    summary = evaluation.summary()
    out = err if as_json else console
    out.print(
        f"{summary['dataset']}: {summary['claims']} claims answered by {summary['llm']} "
        f"(persona {summary['persona']}; {summary['asked_as_questions']} asked as written (questions), "
        f"{summary['asked_as_claims']} as claims) in namespace {summary['namespace']}; corpus "
        f"{summary['corpus_added']} ingested, {summary['corpus_unchanged']} unchanged "
        f"({summary['ingest_seconds']} s)",
        markup=False,
        highlight=False,
    )
    out.print(summary_table(summary))
    if per_query is not None:
        err.print(f"per-claim results written to {per_query}", markup=False, highlight=False)
    if as_json:
        _print_json(summary)


# -- the server and its keys --------------------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Server processes (limits apply per process).")] = 1,
    open_mode: Annotated[
        bool,
        typer.Option(
            "--open", help="Answer requests without a key, as an admin (loopback only; CITELINE_API_OPEN)."
        ),
    ] = False,
) -> None:
    """Run the REST API (OpenAPI at /docs) and the web pages. Every API route but /health needs an API key;
    the pages, /docs and /openapi.json load without one."""
    settings = _settings(ctx, **({"api_open": True} if open_mode else {}))
    if settings.api_open and not _is_loopback(host):
        err.print(
            f"[red]error:[/red] open mode (no API keys) is refused on {host}: serve on 127.0.0.1, or "
            "create keys with `citeline keys create` and drop --open / CITELINE_API_OPEN"
        )
        raise typer.Exit(78)
    # Worker processes build their settings from the environment: pass the command line's on through it.
    for name, value in (ctx.obj or {}).items():
        os.environ[f"CITELINE_{name.upper()}"] = str(value)
    if open_mode:
        os.environ["CITELINE_API_OPEN"] = "true"
    from citeline.api.uvicorn_internals import check_installed

    # Before anything is served: a uvicorn without the hooks overridden here would serve without them.
    _guard(check_installed)
    from citeline.api.app import STARTUP_FAILURE_FILE, read_startup_failure
    from citeline.api.logs import log_config
    from citeline.api.protocol import HttpProtocol
    from citeline.api.supervisor import run
    from citeline.metrics import use_folder

    with tempfile.TemporaryDirectory(prefix="citeline-serve-") as folder:
        # Where a server process (this one, or those of --workers) says why it could not start.
        report = Path(folder) / "startup-failure"
        os.environ[STARTUP_FAILURE_FILE] = str(report)
        # Where every server process keeps its counts, so GET /metrics adds up all of them.
        use_folder(Path(folder) / "metrics")
        stopped: SystemExit | None = None
        try:
            run(
                "citeline.api.app:app_from_env",
                workers=workers,
                healthcheck_seconds=settings.api_worker_healthcheck_seconds,
                factory=True,
                # uvicorn's own, but a URL too long to parse gets the API's 414, not a plain-text 400.
                http=HttpProtocol,
                host=host,
                port=port,
                log_level="info",
                log_config=log_config(settings),
                timeout_keep_alive=int(settings.api_keep_alive_seconds),
            )
        except SystemExit as exc:
            stopped = exc
        failure = read_startup_failure(report)
    if failure is not None:
        code, message = failure
        err.print(f"[red]error:[/red] {_shown(message)}", highlight=False)
        raise typer.Exit(code)
    if stopped is not None:
        raise stopped


keys_app = typer.Typer(help="Create, list and revoke API keys for `citeline serve`.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    role: Annotated[Role, typer.Option(help="admin: everything; reader: search, chat and reading.")],
    scope: Annotated[list[str], typer.Option("--scope", "-s", help="A reader's scope (repeatable).")] = [],  # noqa: B006
    all_scopes: Annotated[bool, typer.Option("--all-scopes", help="A reader of every scope.")] = False,
    name: Annotated[str, typer.Option(help="What the key is for.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line, with the key.")] = False,
) -> None:
    """Create an API key. The key is printed once: it is stored hashed and cannot be shown again."""
    try:
        # Refused before the store is opened (which may start a database).
        keys.reach(role, scope or None, all_scopes)
    except InvalidRequestError as exc:
        err.print(f"[red]error:[/red] {_shown(str(exc))}")
        raise typer.Exit(2) from None
    with _creating(ctx) as cl:
        info, key = cl.create_key(role, scope or None, all_scopes=all_scopes, name=name)
    if as_json:
        _print_json({"key": key, **info.as_dict()})
        return
    console.print(f"created {info.role.value} key {info.id} ({_shown(info.name)})", highlight=False)
    console.print("the key (shown this once; store it now):", highlight=False)
    console.print(key, markup=False, highlight=False)


@keys_app.command("list")
def keys_list(
    ctx: typer.Context,
    include_revoked: Annotated[bool, typer.Option("--revoked", help="Also revoked keys.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False,
) -> None:
    """The API keys (never the keys themselves: only their first characters)."""
    with _citeline(ctx) as cl:
        found = cl.api_keys(include_revoked=include_revoked)
    if as_json:
        _print_json([k.as_dict() for k in found])
        return
    table = Table(
        Column("id", no_wrap=True),
        Column("name", overflow="fold", ratio=1, min_width=8),
        Column("role", no_wrap=True),
        Column("scopes", overflow="fold", ratio=1, min_width=8),
        Column("prefix", no_wrap=True),
        Column("created", min_width=10),
        Column("last used", min_width=10),
        Column("revoked", min_width=10),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for k in found:
        table.add_row(
            str(k.id)[:8],  # what `keys revoke` takes
            Text(printable(k.name)),
            k.role.value,
            Text(printable("(all)" if k.scopes is None else ",".join(k.scopes) or "(universal only)")),
            k.prefix + "...",
            k.created_at.strftime("%Y-%m-%d %H:%M"),
            k.last_used_at.strftime("%Y-%m-%d %H:%M") if k.last_used_at else "",
            k.revoked_at.strftime("%Y-%m-%d %H:%M") if k.revoked_at else "",
        )
    _print_table(table)


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (from `keys list`), or a unique prefix.")],
) -> None:
    """Revoke an API key: requests carrying it are refused from then on."""
    with _citeline(ctx) as cl:
        info = cl.revoke_key(key_id)
    console.print(f"revoked key {info.id} ({_shown(info.name)})", highlight=False)


if __name__ == "__main__":
    app()
