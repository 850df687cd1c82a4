"""BM25 sparse vectors: the keyword half of hybrid search, the same on both engines.

The engine's own BM25 (Qdrant Edge's `Bm25`) turns a text into term-frequency weights; the
collection's sparse vector carries the IDF modifier, so the engine weighs each term by its
rarity in the collection at query time. Both engines get vectors made here, in the process that
writes or searches, so an index moved between engines (a backup restored elsewhere) scores alike.

One tokenization serves English and Chinese in one index (`SPARSE_MODEL`), script by script:
- Han runs are cut into words by jieba (knowledgeops/text/chinese.py) and also add their
  overlapping character pairs, as Lucene's CJK analyzer does: a segmenter cuts the same
  characters differently in different sentences (切分 in a question, 切 / 分成 in the
  document), and the pairs match whichever way either was cut. The words go through the
  engine's word tokenizer, which drops Chinese stop words (的, 是, 什么, 哪里: a question's own
  words would match passages that merely ask something).
- Kana and hangul runs go through the engine's multilingual tokenizer (its Japanese and Korean
  segmenters).
- The rest, NFKC-normalised (full-width digits and letters are the ASCII ones), through the
  engine's word tokenizer with the English stemmer and stop words: all of an English text, and
  the numbers and Latin names of a Chinese one ("1949" or "OAPEC" in a question matches them
  in a Chinese passage; the multilingual tokenizer drops digits).
Each of these is length-normalised on its own, and words and pairs are separate terms (their
ids come from different hashes). An English text gets the terms it got before (NFKC aside).
Chosen by measurement: docs/benchmarks.md, "Search quality".

A collection's vectors and its queries must be made by one tokenization: a collection records
its own when it is created (`SPARSE_MODEL_KEY` in its metadata, base.py), and is written and
searched with it until a re-index rebuilds it with the current one. The previous tokenization
(`LEGACY_SPARSE_MODEL`: the multilingual tokenizer for any text with CJK in it, plus the
pairs) is kept here for the collections it made.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from qdrant_edge import (
    Bm25,
    Bm25Config,
    Language,
    SnowballLanguage,
    SnowballParams,
    StopwordsSet,
    TokenizerType,
)

from knowledgeops.index.engine import IndexOutdatedError, Sparse
from knowledgeops.text import chinese

# Where a chunks collection records the tokenization of its sparse vectors.
SPARSE_MODEL_KEY = "sparse_model"
SPARSE_MODEL = "bm25/nfkc+word+jieba+han-pairs+en-stem+en-zh-stop/2"
# Every collection made before this version: those that recorded nothing (never re-indexed)
# and those that recorded one of these names (re-indexed by an earlier version; the older two
# differ from the last in ways its queries still match).
LEGACY_SPARSE_MODEL = "bm25/word|multilingual+en-stem+en-zh-stop+han-pairs/1"
_LEGACY_NAMES = frozenset(
    {
        LEGACY_SPARSE_MODEL,
        "bm25/multilingual+en-stem+en-zh-stop+han-pairs/1",
        "bm25/multilingual+en-stem+en-zh-stop/1",
    }
)
# BM25's term-frequency saturation and length normalisation: the engine's k and b; the length
# a chunk is normalised against, in Latin-script words (after stop words), in jieba's words
# and in Han character pairs. Measured on the retrieval sets (docs/benchmarks.md): 128 words
# suits English paragraphs and abstracts better than the engine's 256; pairs and jieba words
# do best at 256 (about a 260-character Chinese paragraph).
K, B, AVG_WORDS, AVG_HAN_WORDS, AVG_PAIRS = 1.2, 0.75, 128.0, 256.0, 256.0
_HAN = chinese.HAN_RUN
# Runs of kana and hangul: Japanese or Korean, which jieba does not segment.
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]+")
# Han, kana, hangul: scripts the word tokenizer cannot segment.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def sparse_model_of(metadata: Mapping[str, Any]) -> str:
    """The tokenization a chunks collection's metadata records (see the module docstring)."""
    recorded = metadata.get(SPARSE_MODEL_KEY)
    if recorded is None or recorded in _LEGACY_NAMES:
        return LEGACY_SPARSE_MODEL
    if recorded != SPARSE_MODEL:
        raise IndexOutdatedError(
            f"the index's keyword vectors were made with {recorded!r}, which this version does "
            "not know (a newer version made them): run `knowledgeops reindex`, or upgrade"
        )
    return SPARSE_MODEL


def document_vector(text: str, model: str = SPARSE_MODEL) -> Sparse:
    """A chunk's sparse vector, by the tokenization `model` (its collection's)."""
    return _TOKENIZATIONS[model][0](text)


def query_vector(text: str, model: str = SPARSE_MODEL) -> Sparse:
    """A query's sparse vector, by the tokenization `model` (the searched collection's)."""
    return _TOKENIZATIONS[model][1](text)


# -- the current tokenization -------------------------------------------------------------


def _document(text: str) -> Sparse:
    han, other, rest = _scripts(text)
    # Each script's terms are length-normalised on their own: the Latin-script rest of a
    # Chinese text is a few words, each weighed as in a short English text.
    out = _weights_of(_words().embed_document(rest))
    if other:
        _add(out, _weights_of(_multilingual().embed_document(other)))
    if han:
        _add(out, _weights_of(_han_words().embed_document(_segmented(han))))
        _add(out, _bm25(Counter(map(_term, _pairs_of(han))), AVG_PAIRS))
    return _sparse(out)


def _query(text: str) -> Sparse:
    han, other, rest = _scripts(text)
    out = _weights_of(_words().embed_query(rest))
    if other:
        _add(out, _weights_of(_multilingual().embed_query(other)))
    if han:
        _add(out, _weights_of(_han_words().embed_query(_segmented(han))))
        _add(out, dict.fromkeys(map(_term, _pairs_of(han)), 1.0))
    return _sparse(out)


def _scripts(text: str) -> tuple[list[str], str, str]:
    """(Han runs, kana and hangul runs, the rest NFKC-normalised)."""
    if not _CJK.search(text):
        return [], "", unicodedata.normalize("NFKC", text)
    other = " ".join(_KANA_HANGUL.findall(text))
    # Only the rest is normalised: NFKC of a whole Chinese text costs ~8x as much (its
    # full-width punctuation), and Han characters have nothing to normalise.
    rest = unicodedata.normalize("NFKC", _KANA_HANGUL.sub(" ", _HAN.sub(" ", text)))
    return _HAN.findall(text), other, rest


def _segmented(runs: list[str]) -> str:
    # jieba's words, separated by spaces for the engine's word tokenizer (which drops the
    # Chinese stop words).
    return " ".join(w for run in runs for w in chinese.words(run))


def _pairs_of(runs: list[str]) -> list[str]:
    out: list[str] = []
    for run in runs:
        out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return out


def _bm25(tfs: Counter[int], avg_len: float) -> dict[int, float]:
    norm = K * (1 - B + B * tfs.total() / avg_len)
    return {t: tf * (K + 1) / (tf + norm) for t, tf in tfs.items()}


# -- the legacy tokenization (collections made before SPARSE_MODEL) -------------------------


def _legacy_document(text: str) -> Sparse:
    out = _weights_of(_legacy_model(text).embed_document(text))
    _add(out, _bm25(Counter(map(_term, _pairs_of(_HAN.findall(text)))), AVG_PAIRS))
    return _sparse(out)


def _legacy_query(text: str) -> Sparse:
    out = _weights_of(_legacy_model(text).embed_query(text))
    _add(out, dict.fromkeys(map(_term, _pairs_of(_HAN.findall(text))), 1.0))
    return _sparse(out)


def _legacy_model(text: str) -> Bm25:
    return _multilingual() if _CJK.search(text) else _words()


# -- shared pieces ------------------------------------------------------------------------


_TOKENIZATIONS: dict[str, tuple[Callable[[str], Sparse], Callable[[str], Sparse]]] = {
    SPARSE_MODEL: (_document, _query),
    LEGACY_SPARSE_MODEL: (_legacy_document, _legacy_query),
}


@lru_cache(maxsize=1)
def _words() -> Bm25:
    return _engine_bm25(TokenizerType.Word)


@lru_cache(maxsize=1)
def _multilingual() -> Bm25:
    return _engine_bm25(TokenizerType.Multilingual)


@lru_cache(maxsize=1)
def _han_words() -> Bm25:
    return _engine_bm25(TokenizerType.Word, AVG_HAN_WORDS)


def _engine_bm25(tokenizer: TokenizerType, avg_len: float = AVG_WORDS) -> Bm25:
    return Bm25(
        Bm25Config(
            k=K,
            b=B,
            avg_len=avg_len,
            tokenizer=tokenizer,
            stemmer=SnowballParams(SnowballLanguage.English),
            stopwords=StopwordsSet(languages={Language.English, Language.Chinese}),
        )
    )


def _term(s: str) -> int:
    # A stable 31-bit id (Python's hash() changes per process). Pairs have the same ids in
    # both tokenizations: a Chinese question still matches the pairs of a text with kana.
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=4).digest(), "big") >> 1


def _weights_of(v: Any) -> dict[int, float]:
    return dict(zip(v.indices, v.values, strict=True))


def _add(into: dict[int, float], weights: dict[int, float]) -> None:
    for term, weight in weights.items():
        into[term] = into.get(term, 0.0) + weight


def _sparse(weights: dict[int, float]) -> Sparse:
    keys = sorted(weights)
    return Sparse(keys, [weights[k] for k in keys])
