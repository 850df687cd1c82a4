"""What counts as CJK text: one definition for every local text method.

Chinese (and Japanese) writes no spaces between words, so the toolkit handles these characters
apart from space-separated words: no word boundaries, character n-grams as terms.
"""

from __future__ import annotations

import re

# Hiragana and katakana, CJK unified ideographs with extension A, compatibility ideographs.
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Full-width sentence and clause punctuation (what ends or splits a CJK sentence).
CJK_PUNCTUATION = "\u3000-\u303f\uff01-\uff0f\uff1a-\uff20"

CJK_CHAR = re.compile(f"[{CJK_CHARS}]")
CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_CJK_TEXT = re.compile(f"[{CJK_CHARS}{CJK_PUNCTUATION}]")


def cjk_count(text: str) -> int:
    """How many CJK characters the text has (its length, for a CJK sentence)."""
    return len(CJK_CHAR.findall(text))


def is_cjk(char: str) -> bool:
    """Whether `char` is a CJK character or full-width punctuation (a line that ends with one
    joins the next without a space)."""
    return bool(char) and _CJK_TEXT.fullmatch(char) is not None
