"""Embedder throughput: citeline's ``onnx:all-MiniLM-L6-v2`` against a plain onnxruntime pipeline.

Run from the repository root with the project's virtualenv::

    .venv/bin/python bench/embedder.py [--corpus PATH] [--n 2000] [--threads 0] [--repeat 3]

The chunks are the first ``n`` texts of a BEIR corpus (default: SciFact), each ``title + blank line +
text``. The plain pipeline is what one writes first: default ``SessionOptions`` except the thread
count, batches of 32 texts in input order, each padded to its longest member, truncation at 256
tokens, numpy mean pooling. All pipelines embed the same chunks in every repeat, in rotating order;
figures are medians over repeats, and each ratio is the median of ratios taken within one repeat, as
this machine is noisy. Loading is not timed; tokenising is. citeline's peak memory is measured in a
fresh process that embeds the first 256 chunks. Both pipelines must produce the same vectors (cosine
above 0.999 on every row), or the script exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from citeline.embed import get_embedder
from citeline.embed.onnx import MODELS

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact" / "corpus.jsonl"
SPEC = "onnx:all-MiniLM-L6-v2"
MIN_COSINE = 0.999
# Memory is set by the largest model run, not by the number of texts, so a sample suffices.
RSS_SAMPLE = 256

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


def load_chunks(corpus: Path, n: int) -> list[str]:
    """The first ``n`` documents of a BEIR ``corpus.jsonl`` as ``title + blank line + text``."""
    chunks: list[str] = []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            if len(chunks) == n:
                break
            item = json.loads(line)
            chunks.append(f"{item['title']}\n\n{item['text']}")
    return chunks


class PlainPipeline:
    """The baseline: the obvious onnxruntime code for the same model files."""

    def __init__(self, threads: int, batch_size: int = 32) -> None:
        files = MODELS["all-MiniLM-L6-v2"].locate()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            str(files.model.path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = Tokenizer.from_file(str(files.tokenizer.path))
        self.tokenizer.enable_truncation(max_length=256)
        # No length: pad each batch to its longest member (the file itself pads to a fixed 128).
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` batch by batch, in input order."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            encodings = self.tokenizer.encode_batch(list(texts[start : start + self.batch_size]))
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        return np.concatenate(out).astype(np.float32)


def _timed(embed: Embed, texts: list[str]) -> tuple[float, npt.NDArray[np.float32]]:
    start = time.perf_counter()
    vectors = embed(texts)
    return len(texts) / (time.perf_counter() - start), vectors


def _peak_rss_mb(texts: list[str], threads: int) -> float:
    get_embedder(SPEC, threads=threads).embed(texts)
    # VmHWM, not getrusage: a spawned child's ru_maxrss inherits its parent's peak.
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def citeline_peak_rss_mb(texts: list[str], threads: int) -> float:
    """Peak RSS of a fresh process that loads citeline's embedder and embeds ``texts``."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(_peak_rss_mb, texts, threads).result()


def run(corpus: Path = DEFAULT_CORPUS, n: int = 2000, repeat: int = 3, threads: int = 0) -> dict[str, float]:
    """Embed the first ``n`` chunks of ``corpus`` ``repeat`` times with each pipeline; return the figures.

    ``threads`` is citeline's (0: all cores); the plain pipeline runs at 1 and at 2 threads.
    """
    texts = load_chunks(corpus, n)
    ours = get_embedder(SPEC, threads=threads)
    pipelines: dict[str, Embed] = {
        "plain_1_thread": PlainPipeline(1).embed,
        "plain_2_threads": PlainPipeline(2).embed,
        "citeline": ours.embed,
    }
    for embed in pipelines.values():
        embed(texts[:8])
    rates: dict[str, list[float]] = {name: [] for name in pipelines}
    vectors: dict[str, npt.NDArray[np.float32]] = {}
    names = list(pipelines)
    for r in range(repeat):
        # Rotate so no pipeline always runs first or last as the machine's load drifts.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rate, vectors[name] = _timed(pipelines[name], texts)
            rates[name].append(rate)

    def speedup(baseline: str) -> float:
        return statistics.median(c / b for c, b in zip(rates["citeline"], rates[baseline], strict=True))

    cosine = np.sum(vectors["citeline"] * vectors["plain_2_threads"], axis=1)
    report: dict[str, float] = {"chunks": len(texts), "repeat": repeat}
    report.update({f"{name}_chunks_per_s": statistics.median(rates[name]) for name in names})
    report["citeline_vs_plain_1_thread"] = speedup("plain_1_thread")
    report["citeline_vs_plain_2_threads"] = speedup("plain_2_threads")
    report["max_abs_diff"] = float(np.abs(vectors["citeline"] - vectors["plain_2_threads"]).max())
    report["min_cosine"] = float(cosine.min())
    report["citeline_peak_rss_mb"] = citeline_peak_rss_mb(texts[:RSS_SAMPLE], threads)
    # Mostly the plain pipeline's: its batches of 32 full-length texts need large attention buffers.
    report["bench_process_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return report


def main(argv: list[str] | None = None) -> int:
    """Print the figures as a table, then as one JSON line; status 1 if the pipelines disagree."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="a BEIR corpus.jsonl")
    parser.add_argument("--n", type=int, default=2000, help="chunks: the first N documents")
    parser.add_argument("--threads", type=int, default=0, help="citeline's threads (0: all cores)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    report = run(args.corpus, args.n, args.repeat, args.threads)
    width = max(map(len, report))
    for key, value in report.items():
        print(f"{key:<{width}}  {value:.4g}")
    print(json.dumps(report))
    return 0 if report["min_cosine"] > MIN_COSINE else 1


if __name__ == "__main__":
    sys.exit(main())
