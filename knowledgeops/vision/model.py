"""VISION_ANALYZE with a vision model: the system prompt, and the request (the instruction,
the OCR text of the page if any, the image) answered as a structured `Analysis`."""

from __future__ import annotations

from typing import Any

from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.vision import Analysis
from knowledgeops.models.chat import ChatModel, image_part
from knowledgeops.vision.images import Loaded

# OCR text given to the model at most (characters): a page's text, not a book.
MAX_OCR_CHARS = 8000

SYSTEM = (
    "You analyse one image for a learner's knowledge base. Describe what it shows, list the "
    "objects and each figure (chart, diagram, table, formula) with what it shows, transcribe "
    "the text you can read, and answer the instruction from what the image shows. If OCR text "
    "of the image is given, use it to read small print, but trust the image where they "
    "disagree. Say so when the image does not show what the instruction asks about."
)


async def ask(
    model: ChatModel, loaded: Loaded, instruction: str, ocr_text: str | None
) -> tuple[Analysis, TokenUsage]:
    text = f"Instruction: {instruction}"
    if ocr_text:
        text += f"\n\nOCR text of this image:\n{ocr_text[:MAX_OCR_CHARS]}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": [{"type": "text", "text": text}, image_part(loaded.payload, loaded.mime)],
        },
    ]
    return await model.structured(messages, Analysis)
