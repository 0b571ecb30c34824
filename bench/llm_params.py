"""llama.cpp's prompt-reading settings for the packaged model, timed in turns on a first-token-sized prompt.

Run from the repository root with the project's virtualenv::

    .venv/bin/python -m bench.llm_params [--rounds 10]

One in-process llama.cpp server per variant of :func:`~citeline.answer.providers.local.server_params`
(the provider's settings, both cores for reading and writing): as the provider loads it, flash
attention off, flash attention on, threads that do not poll for work, and the provider's settings on
the file as published (its Q5_0 matrices not widened to Q8_0: see
:mod:`citeline.answer.providers.gguf`). Each round sends every
server the same prompt (the system prompt and two SciFact abstracts cut to about 90 tokens: about 250
tokens, what an answer's prompt holds with the default evidence budget) in a rotating order, so the
variants share the machine's load; each request reads the whole prompt (no prompt cache) and writes one
token. Reported: each variant's median time to first token and prompt tokens/s, and the median of its
per-round ratio to the provider's settings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import xllamacpp

from bench.llm import DEFAULT_MODEL, one_run, prompt
from citeline.answer.providers.local import MODELS, joined_model, packaged_model_path, server_params

# Variant name -> (flash attention type or None for the provider's, poll level or None for the provider's).
VARIANTS: dict[str, tuple[int | None, int | None]] = {
    "provider": (None, None),
    "flash_attn_off": (0, None),
    "flash_attn_on": (1, None),
    "no_polling": (None, 0),
}


def server(path: Path, flash_attn: int | None, poll: int | None) -> Any:
    params = server_params(path, threads=2, batch_threads=2, context=4096)
    if flash_attn is not None:
        params.flash_attn_type = flash_attn
    if poll is not None:
        params.cpuparams.poll = poll
        params.cpuparams_batch.poll = poll
    return xllamacpp.Server(params)


def run(rounds: int, data_dir: Path) -> dict[str, Any]:
    path = packaged_model_path(DEFAULT_MODEL, data_dir)
    servers = {name: server(path, *variant) for name, variant in VARIANTS.items()}
    model = MODELS[DEFAULT_MODEL]
    if model.widened is not None:
        published = joined_model(replace(model, widened=None), data_dir / "published")
        servers["published_file"] = server(published, None, None)
    messages = prompt(2, 90)
    for each in servers.values():  # warm-up: first-request allocations
        one_run(each, prompt(1, 50), 4)
        one_run(each, messages, 1)
    load_before = os.getloadavg()
    names = list(servers)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(one_run(servers[name], messages, 1))
    out: dict[str, Any] = {"load_average": [load_before, os.getloadavg()], "rounds": rounds, "variants": {}}
    for name, timed in runs.items():
        out["variants"][name] = {
            "prompt_tokens": timed[0]["prompt_tokens"],
            "ttft_p50_s": round(statistics.median(t["ttft_s"] for t in timed), 3),
            "prompt_tok_s_p50": round(statistics.median(t["prompt_tok_s"] for t in timed), 1),
            "ratio_to_provider_p50": round(
                statistics.median(
                    t["ttft_s"] / b["ttft_s"] for t, b in zip(timed, runs["provider"], strict=True)
                ),
                3,
            ),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    data_dir = Path(os.environ.get("CITELINE_DATA_DIR") or Path(tempfile.gettempdir()) / "citeline-bench-llm")
    print(json.dumps(run(args.rounds, data_dir), indent=2), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
