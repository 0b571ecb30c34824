"""Measure pypdfium2, pdfplumber and pypdf as page-text extractors for citeline's PDF loader.

Run from the repository root with the project's virtualenv::

    .venv/bin/python bench/pdf_extractors.py [--repeats 5] [--fixtures DIR]

Every (extractor, file) pair runs in a fresh subprocess so peak memory (RSS high-water mark above the
post-import baseline) belongs to that pair alone. Text is cleaned with ``citeline.load.clean`` as the
loader would, then scored for:

- speed: milliseconds per page, median over ``--repeats`` full passes;
- reading order: sentences that must come out contiguous (they cross line breaks, columns or numbered
  lines in the original), per file;
- missing text: recall of the words the extractors agree on (per word, the median count over the three);
- words run together: tokens absent from that shared vocabulary that split into two or more words of it;
- failures: pages that raised; empty pages (the scanned fixtures should be empty for everyone).

A last table checks that citeline's own loader keeps memory flat in page count: it reads the 3-page and
15-page fixtures and a 150-page PDF made of the 15 pages ten times over (sharing fonts, as one long
document does), sampling RSS after every page and tracing Python allocations.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FIXTURES = REPO.parent / "shared" / "fixtures" / "pdfs"

# Sentences as printed; each crosses a line break, a column break or a run of line numbers.
EXPECTED_PHRASES: dict[str, list[str]] = {
    "multicol_latex_pypdf_sample.pdf": [
        "Lorem ipsum dolor sit amet, consectetuer adipiscing elit. Ut purus elit, vestibulum ut, placerat "
        "ac, adipiscing vitae, felis. Curabitur dictum gravida mauris.",
        # Bottom of the left column into the top of the right one.
        "Vivamus viverra fermentum felis. Donec nonummy pellentesque ante. Phasellus adipiscing semper elit.",
        "In hac habitasse platea dictumst.",
    ],
    "multicol_federal_register_2020-17221.pdf": [
        "Investigation of the accident has been completed by the Indonesian authorities (Komite Nasional "
        "Keselamatan Transportasi (KNKT)) with assistance from the National Transportation Safety Board",
        "These effects include stall warning activation, airspeed disagree alert, and altitude disagree",
    ],
    "odd_nics_rotated_table.pdf": [
        "State / Territory Permit Handgun Long Gun *Other **Multiple Admin",
        "Florida 15,907 50,796 28,981 2,268 1,957 121 8 9 0 2,248 1,135 2 40 5 0 36 19 0 0 0 0 103,532",
    ],
    "odd_scotus_transcript_p1.pdf": [
        "The above-entitled matter came on for oral argument before the Supreme Court of the United States "
        "at 1:01 p.m.",
        "STEVEN E. MERCER, ESQ., Deputy Attorney General, Los Angeles, Cal.; on behalf of the Petitioner.",
    ],
    "manual_faa_amt_handbook_sample.pdf": [
        "The Boots self-locking nut is of one piece, all-metal construction designed to hold tight despite "
        "severe vibration.",
    ],
}


def _pages_pdfium(path: str) -> Iterator[str]:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(path)
    try:
        for index in range(len(doc)):
            page = doc[index]
            textpage = page.get_textpage()
            # pdfium marks a hyphen it removed at a line end with \x02; give it back to the cleaner.
            yield textpage.get_text_bounded().replace("\x02", "-\n")
            textpage.close()
            page.close()
    finally:
        doc.close()


def _pages_pdfplumber(path: str) -> Iterator[str]:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        for page in pdf.pages:
            yield page.extract_text() or ""
            page.close()


def _pages_pypdf(path: str) -> Iterator[str]:
    import pypdf

    reader = pypdf.PdfReader(path)
    for page in reader.pages:
        yield page.extract_text() or ""


EXTRACTORS: dict[str, Callable[[str], Iterator[str]]] = {
    "pypdfium2": _pages_pdfium,
    "pdfplumber": _pages_pdfplumber,
    "pypdf": _pages_pypdf,
}


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _worker(name: str, path: str, repeats: int) -> dict[str, Any]:
    """Extract ``path`` with ``name`` ``repeats`` times; report time, text, errors and peak RSS."""
    import importlib
    import logging

    # pypdf logs a warning per font it cannot fully decode; that is noise here, not a failure.
    logging.disable(logging.WARNING)
    extract = EXTRACTORS[name]
    # Import the library before taking the baseline so only extraction counts toward peak memory.
    importlib.import_module(name)
    baseline = _max_rss_mb()
    texts: list[str] = []
    errors: list[str] = []
    per_page: list[float] = []
    for attempt in range(repeats):
        run_texts: list[str] = []
        started = time.perf_counter()
        try:
            for text in extract(path):
                run_texts.append(text)
        except Exception as exc:  # a failure is a result to report, whatever its type
            errors.append(f"page {len(run_texts) + 1}: {type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - started
        per_page.append(elapsed * 1000 / max(len(run_texts), 1))
        if attempt == 0:
            texts = run_texts
    return {
        "ms_per_page": statistics.median(per_page),
        "texts": texts,
        "errors": sorted(set(errors)),
        "rss_peak_mb": _max_rss_mb() - baseline,
    }


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _loader_memory(fixtures: Path) -> list[dict[str, Any]]:
    """Read three PDFs with ``citeline.load.load``; report traced peak and RSS growth per page."""
    import gc
    import tempfile
    import tracemalloc

    import pypdf

    from citeline.load import load

    fifteen = fixtures / "multicol_federal_register_2020-17221.pdf"
    reader = pypdf.PdfReader(fifteen)
    writer = pypdf.PdfWriter()
    for _ in range(10):
        for page in reader.pages:
            writer.add_page(page)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        long_pdf = Path(tmp) / "federal_register_x10.pdf"
        with long_pdf.open("wb") as file:
            writer.write(file)
        del reader, writer
        for _ in load(fifteen).pages:  # warm up imports and allocator arenas
            pass
        for path in (fixtures / "multicol_latex_pypdf_sample.pdf", fifteen, long_pdf):
            gc.collect()
            baseline = _current_rss_mb()
            growth: list[float] = []
            tracemalloc.start()
            for _ in load(path).pages:
                growth.append(_current_rss_mb() - baseline)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append(
                {
                    "file": path.name,
                    "pages": len(growth),
                    "traced_peak_kib": peak / 1024,
                    "rss_after_first_mb": growth[0],
                    "rss_max_mb": max(growth),
                    "rss_last_mb": growth[-1],
                }
            )
    return rows


def _run_worker(name: str, path: Path, repeats: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", name, str(path), str(repeats)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _splits_into_words(token: str, vocabulary: set[str]) -> bool:
    """True when ``token`` is two or more vocabulary words (each 2+ letters) written together."""
    reachable = [True] + [False] * len(token)
    for end in range(2, len(token) + 1):
        reachable[end] = any(
            reachable[start] and token[start:end] in vocabulary for start in range(0, end - 1)
        )
    return reachable[-1]


def _score_file(name: str, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    from citeline.load.clean import clean_text

    cleaned = {ex: [clean_text(t) for t in r["texts"]] for ex, r in results.items()}
    counts = {ex: Counter(w for t in texts for w in _words(t)) for ex, texts in cleaned.items()}
    shared: Counter[str] = Counter()
    for word in set().union(*counts.values()):
        shared[word] = int(statistics.median(c[word] for c in counts.values()))
    shared = +shared
    vocabulary = {w for w in shared if w.isalpha()}
    scores: dict[str, dict[str, Any]] = {}
    for ex, r in results.items():
        joined = _squash("\n".join(cleaned[ex]))
        phrases = EXPECTED_PHRASES.get(name, [])
        found = sum(_squash(p) in joined for p in phrases)
        own = counts[ex]
        recall = sum((own & shared).values()) / max(sum(shared.values()), 1)
        run_together = sorted(
            w for w in own if w.isalpha() and w not in vocabulary and _splits_into_words(w, vocabulary)
        )
        scores[ex] = {
            "pages": len(cleaned[ex]),
            "empty": sum(not t.strip() for t in cleaned[ex]),
            "ms_per_page": r["ms_per_page"],
            "rss_peak_mb": r["rss_peak_mb"],
            "phrases": (found, len(phrases)),
            "recall": recall if shared else None,
            "run_together": run_together,
            "errors": r["errors"],
        }
    return scores


def main() -> None:
    """Run every extractor on every fixture and print one table per file and a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    args = parser.parse_args()
    files = sorted(args.fixtures.glob("*.pdf"))
    header = f"{'file':<42} {'extractor':<10} {'pages':>5} {'empty':>5} {'ms/page':>8} {'peakMB':>7} "
    header += f"{'order':>5} {'recall':>6} {'runon':>5} {'fail':>4}"
    print(header)
    print("-" * len(header))
    totals: dict[str, Counter[str]] = {ex: Counter() for ex in EXTRACTORS}
    time_total: dict[str, float] = dict.fromkeys(EXTRACTORS, 0.0)
    peak: dict[str, float] = dict.fromkeys(EXTRACTORS, 0.0)
    examples: dict[str, set[str]] = {ex: set() for ex in EXTRACTORS}
    for path in files:
        results = {ex: _run_worker(ex, path, args.repeats) for ex in EXTRACTORS}
        for ex, s in _score_file(path.name, results).items():
            recall = "-" if s["recall"] is None else f"{s['recall']:.3f}"
            found, wanted = s["phrases"]
            print(
                f"{path.stem[:42]:<42} {ex:<10} {s['pages']:>5} {s['empty']:>5} {s['ms_per_page']:>8.1f} "
                f"{s['rss_peak_mb']:>7.1f} {f'{found}/{wanted}':>5} {recall:>6} "
                f"{len(s['run_together']):>5} {len(s['errors']):>4}"
            )
            totals[ex].update(
                pages=s["pages"],
                found=found,
                wanted=wanted,
                runon=len(s["run_together"]),
                fail=len(s["errors"]),
            )
            time_total[ex] += s["ms_per_page"] * s["pages"]
            peak[ex] = max(peak[ex], s["rss_peak_mb"])
            examples[ex].update(s["run_together"][:3])
            for error in s["errors"]:
                print(f"    {error}")
    print()
    print(
        f"{'summary':<10} {'ms/page':>8} {'peakMB':>7} {'order':>7} {'runon':>5} {'fail':>4}  run-on examples"
    )
    for ex, t in totals.items():
        order = f"{t['found']}/{t['wanted']}"
        print(
            f"{ex:<10} {time_total[ex] / max(t['pages'], 1):>8.1f} {peak[ex]:>7.1f} {order:>7} "
            f"{t['runon']:>5} {t['fail']:>4}  {', '.join(sorted(examples[ex])[:4])}"
        )
    print()
    out = subprocess.run(
        [sys.executable, __file__, "--loader-memory", str(args.fixtures)],
        capture_output=True,
        text=True,
        check=True,
    )
    print("citeline.load.load, RSS growth above the pre-iteration baseline (MiB) and traced Python peak")
    print(f"{'file':<42} {'pages':>5} {'traced KiB':>10} {'RSS p1':>7} {'RSS max':>7} {'RSS last':>8}")
    for row in json.loads(out.stdout):
        print(
            f"{row['file'][:42]:<42} {row['pages']:>5} {row['traced_peak_kib']:>10.0f} "
            f"{row['rss_after_first_mb']:>7.1f} {row['rss_max_mb']:>7.1f} {row['rss_last_mb']:>8.1f}"
        )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        print(json.dumps(_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    elif len(sys.argv) == 3 and sys.argv[1] == "--loader-memory":
        print(json.dumps(_loader_memory(Path(sys.argv[2]))))
    else:
        main()
