"""Shared fixtures for the loader tests: the real PDFs in /work/shared and hand-built small PDFs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


@pytest.fixture(scope="session")
def pdf_dir() -> Path:
    """The directory of real PDFs described in its SOURCES.md."""
    directory = SHARED / "fixtures" / "pdfs"
    if not directory.is_dir():
        pytest.skip(f"shared PDF fixtures not found at {directory}")
    return directory


#: A ToUnicode map reading Helvetica's "Z" as U+1D465 (mathematical italic small x, a letter outside the
#: Basic Multilingual Plane, which PDFium lists as its two UTF-16 halves) and every other character as
#: itself.
Z_AS_MATH_X = (
    b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Z def /CMapType 2 def\n"
    b"1 begincodespacerange <00> <FF> endcodespacerange\n1 beginbfrange <20> <7E> <0020> endbfrange\n"
    b"1 beginbfchar <5A> <D835DC65> endbfchar\nendcmap CMapName currentdict /CMap defineresource pop end end"
)


def _pdf_bytes(
    content: bytes, size: tuple[int, int], title: str | None, *, to_unicode: bytes | None = None
) -> bytes:
    """A one-page PDF in Helvetica whose page content stream is ``content``, xref table and all; its
    characters read by the ToUnicode map ``to_unicode`` if given (as :data:`Z_AS_MATH_X`)."""
    info = f"<< /Title ({title}) >>".encode() if title else b"<< >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>" % size,
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica%s >>"
        % (b" /ToUnicode 7 0 R" if to_unicode else b""),
        info,
    ]
    if to_unicode:
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(to_unicode), to_unicode))
    return pdf_file(objects, b" /Info 6 0 R")


def pdf_file(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF of ``objects`` (numbered from 1, the catalog first), xref table and trailer (``trailer``:
    more of its entries) and all."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    size = len(objects) + 1
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (size, trailer, xref)
    return bytes(out)


@pytest.fixture
def make_pdf(tmp_path: Path) -> Callable[..., Path]:
    """Write a one-page PDF showing ``text`` at ``at`` (PDF points) and return its path."""

    def make(
        name: str = "doc.pdf",
        text: str = "Hello from a tiny PDF.",
        at: tuple[int, int] = (20, 100),
        size: tuple[int, int] = (300, 200),
        title: str | None = None,
    ) -> Path:
        content = b"BT /F1 12 Tf %d %d Td (%s) Tj ET" % (at[0], at[1], text.encode("latin-1"))
        path = tmp_path / name
        path.write_bytes(_pdf_bytes(content, size, title))
        return path

    return make
