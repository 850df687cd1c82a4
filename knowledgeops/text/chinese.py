"""Chinese words: jieba's segmentation, through rjieba (jieba-rs, the Rust port).

rjieba ships jieba's dictionary inside its wheel, so nothing downloads. It cuts runs of Han
characters exactly as jieba does (all 60,451 runs of two Chinese Wikipedia retrieval sets'
chunks) at ~80 µs per 320-character chunk, where jieba takes 1.6-2 ms and first loads its
dictionary for ~1 s (measured). Importing it loads the dictionary (~200 ms, ~33 MB), so that
happens at the first Chinese text, not at start.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Protocol

# CJK unified ideographs with extension A, and compatibility ideographs: Han characters.
HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


class _Cutter(Protocol):
    def __call__(self, text: str, hmm: bool = True) -> list[str]: ...


@lru_cache(maxsize=1)
def _cut() -> _Cutter:
    import rjieba

    cut: _Cutter = rjieba.cut
    return cut


def words(run: str) -> list[str]:
    """The words of a run of Han characters, in order (jieba's precise mode, with its HMM for
    words not in the dictionary, such as names)."""
    return _cut()(run)


def han_runs(text: str) -> list[str]:
    """The runs of Han characters in `text`."""
    return HAN_RUN.findall(text)
