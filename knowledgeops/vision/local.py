"""VISION_ANALYZE without a vision model: the image's properties (format, size, colour mode,
dominant colours) and the OCR text if any, as a description. It describes; it answers no
instruction."""

from __future__ import annotations

from knowledgeops.contracts.vision import Analysis, ImageProperties


def describe(p: ImageProperties, ocr_text: str | None) -> Analysis:
    colours = ", ".join(f"{c.name} {round(c.share * 100)}%" for c in p.dominant_colours)
    description = (
        f"A {p.width}×{p.height} pixel {p.format.upper()} image ({p.mode}); "
        f"dominant colours: {colours}."
    )
    if ocr_text:
        description += f" OCR found {len(ocr_text.split())} words of text."
    return Analysis(
        description=description, objects=[], figures=[], text_seen=ocr_text or "", answer=""
    )
