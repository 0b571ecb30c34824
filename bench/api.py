"""``citeline serve`` under load: 50 clients searching for 60 s, the API's overhead over the library,
and the server's idle memory.

Run alone with ``.venv/bin/python -m bench.api [--clients 50] [--seconds 60]``, or as the ``api``
section of ``make bench``. The corpus is the search benchmark's (real SciFact texts and vectors,
repeated with jitter; built once and kept), at 10,000 chunks: the API's cost does not grow with it.

- Throughput: ``--clients`` concurrent clients (one asyncio httpx client, one connection each) send
  ``GET /search?q=...&n=10`` with an admin key for ``--seconds``; every non-200 counts as an error.
- Overhead: the same queries, one at a time, alternately through the library in this process and
  through the API, so each pair sees the same load; the overhead is the median of the paired
  differences (HTTP, authentication, rate limiting, JSON, and the client's own parsing). Each pair
  is followed by ``GET /health/live``, a route that does nothing, to show what the bare HTTP round
  trip (client included) costs on the machine at the time.
- Idle RSS: the server process's resident memory after start-up (embedder and keyword index loaded)
  and before any request.
- First token (``--first-token`` alone; the ``api`` section of ``make bench`` runs both): the packaged
  local model answers questions on the user guide over ``POST /chat/stream``, timed to its first
  ``token`` event and to the ``start`` and ``evidence`` events before it (see :func:`first_token`).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.run import SCIFACT, build_search_corpus
from citeline.access import Role
from citeline.engine import Citeline
from citeline.eval.metrics import percentile
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings

CORPUS_CHUNKS = 10_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def _queries(n: int) -> list[str]:
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh][:n]


def _start(
    settings: Settings, port: int, log: Path, llm: str = "extractive", extra: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``citeline serve`` on ``port`` with the bench's settings and ``extra`` ones (``CITELINE_*``), ready.

    The caller's own ``CITELINE_*`` variables are not passed on: the server runs on defaults unless
    ``extra`` says otherwise, so a variant differs from the default in what it names only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
    env.update(
        CITELINE_DATA_DIR=str(settings.data_dir),
        CITELINE_NAMESPACE=settings.namespace,
        CITELINE_LLM=llm,
        CITELINE_API_RATE_LIMIT="0",
    )
    env.update(extra or {})
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "citeline.cli", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"citeline serve exited:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=5).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"citeline serve was not ready in 300 s:\n{log.read_text()}")


def overhead(cl: Citeline, url: str, key: str, queries: list[str]) -> dict[str, float]:
    """Paired per-query latencies, library then API, one request at a time."""
    library, api, differences, empty = [], [], [], []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        for q in queries[:10]:  # warm both paths
            cl.search(SearchRequest(q, top_k=10))
            client.get("/search", params={"q": q, "n": 10}).raise_for_status()
        for q in queries:
            t0 = time.perf_counter()
            cl.search(SearchRequest(q, top_k=10))
            t1 = time.perf_counter()
            client.get("/search", params={"q": q, "n": 10}).raise_for_status()
            t2 = time.perf_counter()
            client.get("/health/live").raise_for_status()
            empty.append((time.perf_counter() - t2) * 1e3)
            library.append((t1 - t0) * 1e3)
            api.append((t2 - t1) * 1e3)
            differences.append((t2 - t1 - (t1 - t0)) * 1e3)
    return {
        "api_single_p50_ms": percentile(api, 50),
        "library_single_p50_ms": percentile(library, 50),
        "api_overhead_p50_ms": statistics.median(differences),
        # A route that does nothing: what the HTTP round trip alone costs on this machine.
        "api_empty_route_p50_ms": percentile(empty, 50),
    }


async def load(url: str, key: str, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` concurrent clients searching for ``seconds``."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60, limits=limits
    ) as client:
        stop = time.perf_counter() + seconds

        async def one(worker: int) -> None:
            i = worker
            while time.perf_counter() < stop:
                q = queries[i % len(queries)]
                i += clients
                t0 = time.perf_counter()
                try:
                    response = await client.get("/search", params={"q": q, "n": 10})
                    if response.status_code != 200:
                        errors[f"HTTP {response.status_code}"] += 1
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                latencies.append((time.perf_counter() - t0) * 1e3)

        began = time.perf_counter()
        await asyncio.gather(*(one(w) for w in range(clients)))
        elapsed = time.perf_counter() - began
    return {
        "api_load_clients": clients,
        "api_load_requests": len(latencies),
        "api_load_errors": sum(errors.values()),
        "api_load_error_kinds": dict(errors),
        "api_load_requests_per_s": len(latencies) / elapsed,
        "api_load_p50_ms": percentile(latencies, 50),
        "api_load_p99_ms": percentile(latencies, 99),
    }


def run(settings: Settings, clients: int = 50, seconds: float = 60, queries: int = 200) -> dict[str, Any]:
    ns = settings.model_copy(update={"namespace": f"bench_api_{CORPUS_CHUNKS}", "llm": "extractive"})
    qs = _queries(queries)
    with Citeline(ns) as cl:
        build_search_corpus(cl, CORPUS_CHUNKS, scopes=9)
        info, key = cl.create_key(Role.ADMIN, name="bench")
        cl.warm_up()
        port = _free_port()
        log = ns.data_dir.expanduser().resolve() / "bench-api-serve.log"
        process = _start(ns, port, log)
        try:
            out: dict[str, Any] = {"api_idle_rss_mb": _rss_mb(process.pid)}
            url = f"http://127.0.0.1:{port}"
            out.update(overhead(cl, url, key, qs))
            out.update(asyncio.run(load(url, key, qs, clients, seconds)))
            out["api_rss_after_load_mb"] = _rss_mb(process.pid)
        finally:
            process.terminate()
            process.wait(timeout=30)
            cl.revoke_key(info.id)
    return out


#: Questions on the user guide (docs/ at GUIDE_COMMIT), which the first-token run ingests: what `make demo`
#: asks, and kin.
GUIDE_QUESTIONS = (
    "how do I keep documents of one care journey apart from another?",
    "what happens to searches while a document is re-ingested?",
    "which file types can citeline ingest?",
    "how do I make citeline answer without a language model?",
    "what does the relevance floor of answers do?",
    "how are follow-up questions searched?",
)


#: The commit whose user guide (docs/) the first-token run asks about. The guide changes with the code,
#: and with it the passages and prompts timed: asking about one fixed version keeps runs of different
#: sessions comparable. Change it only on purpose, and say so beside the figures.
GUIDE_COMMIT = "7d89d29107cdc89ce62e9972020164461b8d5ba4"


def frozen_guide(data_dir: Path, commit: str = GUIDE_COMMIT) -> tuple[Path, str]:
    """The user guide at ``commit``, exported once into ``data_dir``, and that commit; or, where this
    checkout does not hold it (a shallow clone), the working tree's docs/ and ``"working-tree"``."""
    repo = Path(__file__).resolve().parents[1]
    folder = data_dir / f"bench-guide-{commit[:12]}"
    if (folder / "docs").is_dir():
        return folder / "docs", commit
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "docs"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        print(f"bench: commit {commit} is not in this checkout; asking about the working tree's docs/")
        return repo / "docs", "working-tree"
    staging = data_dir / f".bench-guide-{os.getpid()}"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(staging, filter="data")
    staging.rename(folder)
    return folder / "docs", commit


def first_token(
    settings: Settings,
    rounds: int = 2,
    questions: int = len(GUIDE_QUESTIONS),
    variants: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Milliseconds from ``POST /chat/stream`` to the first ``token`` event, with the packaged local
    model answering questions on the user guide; and the server's memory after its first answer.

    Where the time goes, as the client sees it (medians): to the ``start`` event (authentication, the
    conversation made, the question rewritten), to ``evidence`` (the search, the evidence focused on
    the question and the prompt built), and from ``evidence`` to the first token (the model reading
    its prompt and writing its first token, and the server passing it on).

    ``variants`` (name -> ``CITELINE_*`` settings) starts one server per variant on the same store and
    asks each question of every variant in turn, the order rotating from one question to the next, so
    a slow spell of the machine falls on all of them; the figures of each are suffixed with its name
    (none when there is one variant), and ``sse_first_token_ratio[name]`` is the median, over the
    questions timed, of each variant's first token over the first variant's for the same question
    asked in the same turn. ``load_average`` is the machine's 1-minute load at the start and the end
    of the timed rounds: figures mean little beside a busy machine's.
    """
    variants = variants or {"": {}}
    guide, revision = frozen_guide(settings.data_dir.expanduser().resolve())
    # One namespace per version of the guide: a store never mixes two versions' passages.
    ns = settings.model_copy(update={"namespace": f"bench_api_answers_{revision[:8]}"})
    asked = GUIDE_QUESTIONS[:questions]
    names = list(variants)
    with Citeline(ns) as cl:
        cl.ingest([guide])
        info, key = cl.create_key(Role.ADMIN, name="bench-answers")
        processes: dict[str, subprocess.Popen[bytes]] = {}
        marks: dict[str, dict[str, list[float]]] = {
            n: {"start": [], "evidence": [], "token": [], "complete": []} for n in names
        }
        fell_back = dict.fromkeys(names, 0)
        rss_after_first: dict[str, float] = {}
        try:
            ports = {}
            for name in names:
                ports[name] = _free_port()
                log = ns.data_dir.expanduser().resolve() / f"bench-api-answers{name and '-' + name}.log"
                processes[name] = _start(ns, ports[name], log, llm=Settings().llm, extra=variants[name])
            headers = {"Authorization": f"Bearer {key}"}
            clients = {
                n: httpx.Client(base_url=f"http://127.0.0.1:{ports[n]}", headers=headers, timeout=600)
                for n in names
            }
            turn = 0
            load: list[float] = []
            for round_ in range(rounds + 1):  # the first round warms the models up, untimed
                if round_ == 1:
                    load.append(round(os.getloadavg()[0], 2))
                for question in asked:
                    for name in names[turn % len(names) :] + names[: turn % len(names)]:
                        seen = _ask(clients[name], question)
                        if round_:
                            for event, times in marks[name].items():
                                times.append(seen.get(event, float("nan")))
                            fell_back[name] += bool(seen.get("fell_back"))
                        if name not in rss_after_first:
                            rss_after_first[name] = _rss_mb(processes[name].pid)
                    turn += 1
            load.append(round(os.getloadavg()[0], 2))
            for client in clients.values():
                client.close()
        finally:
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                process.wait(timeout=60)
            cl.revoke_key(info.id)
    out: dict[str, Any] = {"load_average": load, "guide": revision}
    for name in names:
        m, suffix = marks[name], name and f"[{name}]"
        if len(names) > 1:
            out[f"sse_first_token_ratio{suffix}"] = statistics.median(
                t / b for t, b in zip(m["token"], marks[names[0]]["token"], strict=True)
            )
        out |= {
            f"sse_first_token_p50_ms{suffix}": statistics.median(m["token"]),
            f"sse_answer_p50_ms{suffix}": statistics.median(m["complete"]),
            f"sse_start_p50_ms{suffix}": statistics.median(m["start"]),
            f"sse_evidence_p50_ms{suffix}": statistics.median(m["evidence"]),
            f"sse_evidence_to_token_p50_ms{suffix}": statistics.median(
                t - e for t, e in zip(m["token"], m["evidence"], strict=True)
            ),
            f"sse_answers{suffix}": len(m["token"]),
            f"sse_fell_back{suffix}": fell_back[name],
            f"api_rss_after_first_answer_mb{suffix}": rss_after_first.get(name),
        }
    return out


def _variant(text: str) -> tuple[str, dict[str, str]]:
    """``name:KEY=VALUE,KEY=VALUE`` (``KEY`` without its ``CITELINE_`` prefix) as a variant; ``name:``
    alone is the defaults."""
    name, _, rest = text.partition(":")
    pairs = [p for p in rest.split(",") if p]
    if not name or any("=" not in p for p in pairs):
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected name:KEY=VALUE[,KEY=VALUE...]")
    return name, {f"CITELINE_{k.strip().upper()}": v.strip() for k, v in (p.split("=", 1) for p in pairs)}


def _ask(client: httpx.Client, question: str) -> dict[str, float]:
    """Milliseconds from the request to the first of each event; ``fell_back`` from ``complete``."""
    seen: dict[str, float] = {}
    t0 = time.perf_counter()
    event = ""
    with client.stream("POST", "/chat/stream", json={"question": question}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
                seen.setdefault(event, (time.perf_counter() - t0) * 1e3)
            elif event == "complete" and line.startswith("data: "):
                seen["fell_back"] = float(json.loads(line[6:])["fell_back"])
    return seen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--first-token", action="store_true", help="Measure the first streamed token with the local model."
    )
    parser.add_argument("--rounds", type=int, default=2, help="--first-token: timed rounds of questions.")
    parser.add_argument(
        "--questions", type=int, default=len(GUIDE_QUESTIONS), help="--first-token: guide questions asked."
    )
    parser.add_argument(
        "--variant",
        type=_variant,
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="--first-token: a server with these settings (e.g. 'short:answer_evidence_tokens=100'), "
        "timed in turns with the others; 'base:' is the defaults. Repeat for more.",
    )
    args = parser.parse_args(argv)
    if args.first_token:
        report = first_token(Settings(), args.rounds, args.questions, dict(args.variant) or None)
    else:
        report = run(Settings(), args.clients, args.seconds, args.queries)
    width = max(len(k) for k in report)
    for k, v in report.items():
        print(f"{k:<{width}}  {v:.3f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
