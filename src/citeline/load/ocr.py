"""OCR of scanned pages with Tesseract: Debian's ``tesseract-ocr`` (with ``-eng``), through pytesseract.

A page is rendered at :data:`DPI`, its orientation found by Tesseract's orientation detection (OSD),
turned upright and read. Its confidence is the mean of Tesseract's word confidences (0 to 100).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from citeline.errors import LoadError

if TYPE_CHECKING:
    from PIL.Image import Image

#: Resolution pages are rendered at: Tesseract reads body text best at about 300 DPI; 200 read the
#: fixtures' text as well (word confidence 95) in two thirds of the time.
DPI = 200


@dataclass(frozen=True)
class OcrText:
    """What Tesseract read on one page: its text (lines and paragraphs kept), mean word confidence and
    the clockwise degrees the page was turned to be upright."""

    text: str
    confidence: float
    rotated: int


def available() -> bool:
    """Whether the ``tesseract`` program is installed (``make install`` installs it)."""
    return shutil.which("tesseract") is not None


def read(image: Image, source: str) -> OcrText:
    """Read ``image`` upright; a page Tesseract finds no words on gives empty text."""
    import pytesseract  # loaded only for scanned pages

    try:
        try:
            osd = pytesseract.image_to_osd(image, output_type=pytesseract.Output.DICT)
            rotate = int(osd["rotate"]) % 360
        except pytesseract.TesseractError:
            rotate = 0  # too few characters to tell the orientation: read it as it is
        upright = image.rotate(-rotate, expand=True) if rotate else image
        data = pytesseract.image_to_data(upright, output_type=pytesseract.Output.DICT)
    except (pytesseract.TesseractError, OSError) as exc:
        raise LoadError(source, f"OCR failed ({exc})") from exc
    lines: dict[tuple[int, int, int], list[str]] = {}
    confidences: list[float] = []
    for word, conf, block, par, line in zip(
        data["text"], data["conf"], data["block_num"], data["par_num"], data["line_num"], strict=True
    ):
        if word.strip():
            lines.setdefault((block, par, line), []).append(word.strip())
            confidences.append(max(float(conf), 0.0))
    text, previous = "", None
    for (block, par, _), words in lines.items():
        if previous is not None:
            text += "\n\n" if (block, par) != previous else "\n"
        text += " ".join(words)
        previous = (block, par)
    mean = sum(confidences) / len(confidences) if confidences else 0.0
    return OcrText(text, round(mean, 1), rotate)
