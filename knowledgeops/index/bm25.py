"""BM25 sparse vectors: the keyword half of hybrid search, the same on both engines.

The engine's own BM25 (Qdrant Edge's `Bm25`) turns a text into term-frequency weights; the
collection's sparse vector carries the IDF modifier, so the engine weighs each term by its
rarity in the collection at query time. Both engines get vectors made here, in the process that
writes or searches, so an index moved between engines (a backup restored elsewhere) scores alike.

One tokenization serves English and Chinese in one index: the multilingual tokenizer segments
Chinese into words (a whitespace tokenizer would make a sentence one token) and splits Latin
text at word boundaries; the English stemmer and stop words only touch Latin-script tokens, and
Chinese function words (的, 了, 是, ...) are dropped as stop words. A word segmenter cuts the
same characters differently in different sentences (切分 in a question, 切 / 分成 in the
document), so every run of Han characters also adds its overlapping character pairs as terms,
as Lucene's CJK analyzer does: a question then matches the document whichever way either was
cut. A text with no CJK character at all is tokenized by the word tokenizer instead: the same
terms for ordinary text (checked on 300 English paragraphs), at less than half the cost (the
multilingual one detects each text's language; measured 263 vs 112 µs per 360-word chunk,
the largest single cost of an import). Chosen by measurement: docs/benchmarks.md, "Search
quality".
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from functools import lru_cache

from qdrant_edge import (
    Bm25,
    Bm25Config,
    Language,
    SnowballLanguage,
    SnowballParams,
    StopwordsSet,
    TokenizerType,
)

from knowledgeops.index.engine import Sparse

# Recorded in each chunks collection's metadata: vectors made with another tokenization do not
# match this one's queries (a re-index rebuilds them).
SPARSE_MODEL = "bm25/word|multilingual+en-stem+en-zh-stop+han-pairs/1"
# BM25's term-frequency saturation and length normalisation: the engine's k and b; the length
# a chunk is normalised against, in words (after stop words) and in Han character pairs.
# Measured on the retrieval sets (docs/benchmarks.md): 128 words suits English paragraphs and
# abstracts better than the engine's 256, and pairs do best at 256 (about a 260-character
# Chinese paragraph).
K, B, AVG_WORDS, AVG_PAIRS = 1.2, 0.75, 128.0, 256.0
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Han, kana, hangul: scripts the word tokenizer cannot segment.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def _model(text: str) -> Bm25:
    return _multilingual() if _CJK.search(text) else _words()


@lru_cache(maxsize=1)
def _words() -> Bm25:
    return _bm25(TokenizerType.Word)


@lru_cache(maxsize=1)
def _multilingual() -> Bm25:
    return _bm25(TokenizerType.Multilingual)


def _bm25(tokenizer: TokenizerType) -> Bm25:
    return Bm25(
        Bm25Config(
            k=K,
            b=B,
            avg_len=AVG_WORDS,
            tokenizer=tokenizer,
            stemmer=SnowballParams(SnowballLanguage.English),
            stopwords=StopwordsSet(languages={Language.English, Language.Chinese}),
        )
    )


def _pairs(text: str) -> list[str]:
    out: list[str] = []
    for run in _HAN.findall(text):
        out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return out


def _term(pair: str) -> int:
    # A stable 31-bit id (Python's hash() changes per process).
    return int.from_bytes(hashlib.blake2b(pair.encode(), digest_size=4).digest(), "big") >> 1


def _merged(words: dict[int, float], pairs: dict[int, float]) -> Sparse:
    for term, weight in pairs.items():
        words[term] = words.get(term, 0.0) + weight
    keys = sorted(words)
    return Sparse(keys, [words[k] for k in keys])


def document_vector(text: str) -> Sparse:
    v = _model(text).embed_document(text)
    pairs = _pairs(text)
    norm = K * (1 - B + B * len(pairs) / AVG_PAIRS)
    weights = {_term(p): tf * (K + 1) / (tf + norm) for p, tf in Counter(pairs).items()}
    return _merged(dict(zip(v.indices, v.values, strict=True)), weights)


def query_vector(text: str) -> Sparse:
    v = _model(text).embed_query(text)
    return _merged(
        dict(zip(v.indices, v.values, strict=True)), dict.fromkeys(map(_term, _pairs(text)), 1.0)
    )
