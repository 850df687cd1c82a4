"""The sentences of English and Chinese text, with its Markdown markers removed.

Chunks hold text as parsed: Markdown with its markers, or (PDF, HTML, DOCX) headings on bare
lines of their own. A heading is no sentence, and joined to the line after it would make one
no document says ("Groundwater Some precipitation infiltrates ..."), so text is read line by
line: headings, code blocks and table rows are left out, and each paragraph or list item is
split into sentences on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from knowledgeops.text.cjk import CJK_CHARS, cjk_count, is_cjk

# A heading found without markup is at most this long (a longer line is prose).
MAX_HEADING_WORDS = 12
MAX_HEADING_CJK = 30
# ... and, with a line of its paragraph after it, at most this share of the longest line:
# the first line of a hard-wrapped paragraph fills the width, a heading does not.
HEADING_WIDTH_SHARE = 0.6

# Sentence ends: .!? before a capital, a digit, an opening quote or CJK; 。！？ anywhere (a
# closing quote right after one stays with its sentence).
_SENTENCE_END = re.compile(
    rf"(?<=[.!?])\s+(?=[\"'“‘(\[]?[A-Z0-9{CJK_CHARS}])"
    r"|(?<=[。！？])(?![”’」』）)])\s*|(?<=[。！？][”’」』）)])\s*"
)
# A line ending so ends a sentence: a heading may follow it.
_ENDS_SENTENCE = re.compile(r"[.!?。！？][\"'”’」』）)]*$")
# A line ending so is prose, never a heading.
_PROSE_END = frozenset(".!?,;:。！？，；：、…\"'”’")

_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_UNDERLINE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_RULE = re.compile(r"^ {0,3}(?:(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_ROW = re.compile(r"^\||\s\|\s")
_QUOTE = re.compile(r"^(?:>[ \t]?)+")
_BULLET = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])[ \t]+")

# Inline Markdown, replaced by the text it shows.
_INLINE = [
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # image: its alt text
    (re.compile(r"\[([^\]]+)\](?:\([^)]*\)|\[[^\]]*\])"), r"\1"),  # link: its text
    (re.compile(r"<((?:https?|mailto):[^>\s]+)>"), r"\1"),  # autolink
    (re.compile(r"(`+)\s*(.+?)\s*\1"), r"\2"),  # inline code
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # strong
    (re.compile(r"(?<![\w*])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])"), r"\2"),  # emphasis
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), r"\1"),  # strikethrough
    (re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~<>])"), r"\1"),  # escaped punctuation
]


def sentences(text: str, headings: Iterable[str] = ()) -> list[str]:
    """The sentences of `text` in order, Markdown markers removed and white space collapsed.

    `headings` are titles known to head the text (a chunk's heading path): a line that is one
    of them is left out even where nothing else marks it as a heading.
    """
    known = {_bare(h) for h in headings if h.strip()}
    out: list[str] = []
    for paragraph in _paragraphs(text, known):
        for raw in _SENTENCE_END.split(plain_inline(paragraph)):
            sentence = " ".join(raw.split())
            if sentence:
                out.append(sentence)
    return out


def plain_inline(text: str) -> str:
    """`text` without inline Markdown: emphasis, code ticks, link and image syntax."""
    for pattern, shown in _INLINE:
        text = pattern.sub(shown, text)
    return text


def _paragraphs(text: str, known: set[str]) -> list[str]:
    """The prose paragraphs and list items of `text`, each one string."""
    lines = text.splitlines()
    longest = max((len(line.strip()) for line in lines), default=0)
    out: list[str] = []
    current: list[str] = []
    fence: str | None = None
    # At a paragraph's start or after a sentence's end: where a bare heading can stand.
    boundary = True
    quoted = False

    def flush() -> None:
        if current:
            out.append(_join(current))
            current.clear()

    for i, raw in enumerate(lines):
        line = raw.strip()
        if fence is not None:  # code is not prose
            if line.startswith(fence):
                fence = None
            continue
        opening = _FENCE.match(raw)
        if opening:
            flush()
            fence, boundary = opening.group(1), True
            continue
        if _UNDERLINE.match(raw) or _RULE.match(raw):
            # Under a one-line paragraph, a setext heading's underline; otherwise a rule.
            if len(current) == 1 and not _RULE.match(raw):
                current.clear()
            flush()
            boundary = True
            continue
        quote = _QUOTE.match(line)
        if (quote is not None) != quoted:  # a block quote is a paragraph of its own
            flush()
            quoted, boundary = quote is not None, True
        line = line[quote.end() :].strip() if quote else line
        if not line:
            flush()
            boundary = True
            continue
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if (
            _ATX_HEADING.match(line)
            or _TABLE_ROW.search(line)
            or _bare(line) in known
            or (boundary and _bare_heading(line, following, longest))
        ):
            flush()
            boundary = True
            continue
        bullet = _BULLET.match(line)
        if bullet:  # a list item is a paragraph of its own
            flush()
            line = line[bullet.end() :].strip()
        current.append(line)
        boundary = _ENDS_SENTENCE.search(line) is not None
    flush()
    return out


def _bare_heading(line: str, following: str, longest: int) -> bool:
    """Whether `line`, at a sentence boundary, is a heading without markup (as PDF, HTML and
    DOCX text has them): short, not ending like prose, starting like a title, and not
    continued by the next line."""
    if line[-1] in _PROSE_END:
        return False
    if not (line[0].isupper() or line[0].isdigit() or is_cjk(line[0])):
        return False
    if len(line.split()) > MAX_HEADING_WORDS or cjk_count(line) > MAX_HEADING_CJK:
        return False
    if not following:
        return True  # a line standing alone: a title, not a sentence
    if following[0].islower():
        return False  # a wrapped sentence goes on
    return len(line) <= HEADING_WIDTH_SHARE * longest


def _join(lines: list[str]) -> str:
    """The lines of a paragraph as one: CJK lines join without a space (a CJK sentence has
    none, and a space would cut its terms)."""
    text = lines[0]
    for line in lines[1:]:
        text += line if is_cjk(text[-1]) and is_cjk(line[0]) else " " + line
    return text


def _bare(line: str) -> str:
    """A line as compared with a known heading: no markers, white space collapsed, any case."""
    return " ".join(plain_inline(line.strip().lstrip("#")).split()).casefold()
