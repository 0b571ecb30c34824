"""Local answering models: prompt and generation speed, time to first token, and the prompt that fits.

Run from the repository root with the project's virtualenv::

    .venv/bin/python -m bench.llm [--models NAME ...] [--threads 1 2] [--batch-threads N] [--repeat 3]
        [--target 1.5]

For each packaged model installed (see ``citeline.answer.providers.local.MODELS``) and each thread count
(``--batch-threads`` sets the prompt-reading threads apart from the writing ones),
the model answers a realistic prompt: a system prompt, five SciFact abstracts of about 200 tokens each as
numbered evidence, and a SciFact claim as the question (about 1,300 prompt tokens). llama.cpp's own
timings give prompt processing (tokens/s over the whole prompt) and generation (tokens/s over 64 tokens,
end of sequence ignored); time to first token is measured from the request to the first streamed text.
The model is loaded with the provider's own settings (``server_params``) and warmed up first; loading is
not timed. Figures are medians over ``repeat`` runs, as this machine is shared and noisy.

The fit: for the default model, time to first token is also measured for evidence of 0, 200 and 500
tokens, and a straight line ``ttft = a + b * prompt_tokens`` is fitted to the medians; ``fit`` reports
the prompt and the evidence (prompt less the fixed part: system prompt, question, chat template) that
answer within ``--target`` seconds, once on wall time and once on this process's CPU time (all threads),
which the other users of a shared machine disturb less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xllamacpp

from citeline.answer.llm import GenerationOptions, Message, get_llm
from citeline.answer.providers.local import MODELS, packaged_model_path, server_params
from citeline.errors import GenerationError
from citeline.settings import Settings

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
SYSTEM = (
    "You answer questions from documents. Answer only from the numbered sources. After each claim, cite "
    "its source number in brackets, like [1] or [1][3]; use only the numbers shown. If the sources do not "
    "answer the question, say so plainly. Do not list the sources at the end. Be brief."
)
# Characters per Qwen token in SciFact abstracts, measured: 200 tokens is about 1,000 characters.
CHARS_PER_TOKEN = 4.9
GENERATED = 64


def evidence(passages: int, tokens: int) -> tuple[str, list[str]]:
    """A SciFact claim and ``passages`` abstracts cut to about ``tokens`` tokens each (its gold one first)."""
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as fh:
        query = json.loads(fh.readline())
    with (SCIFACT / "qrels" / "test.tsv").open(encoding="utf-8") as fh:
        gold = {line.split("\t")[1] for line in fh if line.split("\t")[0] == query["_id"]}
    texts: dict[str, str] = {}
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            texts[doc["_id"]] = f"{doc['title']}\n{doc['text']}"
    chars = int(tokens * CHARS_PER_TOKEN)
    long_enough = [i for i, t in texts.items() if len(t) >= chars and i not in gold]
    chosen = [*sorted(gold), *long_enough][:passages]
    return query["text"], [texts[i][:chars] for i in chosen]


def prompt(passages: int, tokens: int) -> list[dict[str, str]]:
    question, texts = evidence(passages, tokens)
    sources = "\n\n".join(f"[{n}] {text}" for n, text in enumerate(texts, 1))
    user = f"Sources:\n\n{sources}\n\nQuestion: {question}" if texts else f"Question: {question}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def one_run(server: Any, messages: list[dict[str, str]], max_tokens: int) -> dict[str, float]:
    """One streamed request: time to first text, and llama.cpp's prompt and generation timings.

    ``ttft_cpu_s`` is the CPU time this process spent until the first text, all threads counted: on a
    shared machine it is the steadier figure (with one thread it is the time an idle core would take).
    """
    first: list[tuple[float, float]] = []
    timings: dict[str, float] = {}
    errors: list[Any] = []

    def on_chunk(chunk: dict[str, Any]) -> bool:
        if "error" in chunk:
            errors.append(chunk["error"])
            return True
        for choice in chunk.get("choices") or ():
            if not first and (choice.get("delta") or {}).get("content"):
                first.append((time.perf_counter(), time.process_time()))
        timings.update(chunk.get("timings") or {})
        return False

    request = {
        "messages": messages,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    start, cpu = time.perf_counter(), time.process_time()
    server.handle_chat_completions(request, on_chunk)
    if errors or not first:
        raise GenerationError(f"benchmark request failed: {errors or 'no text'}")
    return {
        "ttft_s": first[0][0] - start,
        "ttft_cpu_s": first[0][1] - cpu,
        "prompt_tokens": timings["prompt_n"],
        "prompt_tok_s": timings["prompt_per_second"],
        "gen_tokens": timings["predicted_n"],
        "gen_tok_s": timings["predicted_per_second"],
    }


def medians(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a + b * x``."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def run(
    models: Sequence[str] = tuple(MODELS),
    threads: Sequence[int] = (1, 2),
    batch_threads: int | None = None,
    repeat: int = 3,
    target_s: float = 1.5,
    data_dir: Path | None = None,
    context: int = 4096,
) -> dict[str, Any]:
    """Measure every installed model of ``models`` at each thread count; see the module docstring."""
    data_dir = data_dir or Path(tempfile.gettempdir()) / "citeline-bench-llm"
    realistic = prompt(5, 200)
    out: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "repeat": repeat,
        "target_s": target_s,
        "models": {},
        "skipped": {},
    }
    for name in models:
        try:
            path = packaged_model_path(name, data_dir)
        except GenerationError as exc:
            out["skipped"][name] = str(exc)
            continue
        per_thread: dict[str, Any] = {}
        for count in threads:
            server = xllamacpp.Server(
                server_params(path, threads=count, batch_threads=batch_threads, context=context)
            )
            one_run(server, prompt(1, 50), 4)  # warm-up: first-request allocations
            runs = [one_run(server, realistic, GENERATED) for _ in range(repeat)]
            row: dict[str, Any] = medians(runs)
            if name == DEFAULT_MODEL:
                row["fit"] = fit_prompt(server, runs, repeat, target_s)
            per_thread[str(count)] = row
            del server
            print(f"{name} threads={count}: {json.dumps(row)}", file=sys.stderr)
        out["models"][name] = per_thread
    if DEFAULT_MODEL in out["models"]:
        out["provider_ttft_s"] = provider_ttft(data_dir, realistic, repeat)
    return out


def fit_prompt(
    server: Any, realistic: Sequence[dict[str, float]], repeat: int, target_s: float
) -> dict[str, Any]:
    """Time to first token against prompt size, and the prompt and evidence that answer in ``target_s``.

    Fitted twice: on wall time (what a user waits on this machine as loaded now) and on CPU time.
    """
    sizes = [
        medians([one_run(server, prompt(passages, tokens), 1) for _ in range(repeat)])
        for passages, tokens in ((0, 0), (1, 200), (5, 100))
    ]
    sizes.append(medians(realistic))
    fixed = sizes[0]["prompt_tokens"]
    out: dict[str, Any] = {
        "fixed_prompt_tokens": fixed,
        "points": [{k: s[k] for k in ("prompt_tokens", "ttft_s", "ttft_cpu_s")} for s in sizes],
    }
    for clock in ("ttft_s", "ttft_cpu_s"):
        a, b = fit_line([(s["prompt_tokens"], s[clock]) for s in sizes])
        fits = (target_s - a) / b
        out[clock] = {
            "fixed_s": round(a, 3),
            "ms_per_prompt_token": round(b * 1000, 3),
            "prompt_tokens_within_target": int(fits),
            "evidence_tokens_within_target": max(int(fits - fixed), 0),
        }
    return out


def provider_ttft(data_dir: Path, messages: list[dict[str, str]], repeat: int) -> float:
    """Time to first token of the realistic prompt through the provider itself (default settings)."""
    llm = get_llm(f"local:{DEFAULT_MODEL}", Settings(data_dir=data_dir))
    chat = [Message("system", messages[0]["content"]), Message("user", messages[1]["content"])]
    options = GenerationOptions(max_tokens=1)
    next(iter(llm.stream(chat, options)))  # load and warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _piece in llm.stream(chat, options):
            times.append(time.perf_counter() - start)
            break
    llm.close()
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batch-threads", type=int, help="threads reading the prompt (default: --threads)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", type=float, default=1.5, help="seconds to the first token")
    parser.add_argument("--data-dir", type=Path, default=None, help="where joined models are kept")
    args = parser.parse_args()
    result = run(args.models, args.threads, args.batch_threads, args.repeat, args.target, args.data_dir)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
