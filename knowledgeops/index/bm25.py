"""BM25 sparse vectors: the keyword half of hybrid search, the same on both engines.

The engine's own BM25 (Qdrant Edge's `Bm25`) turns a text into term-frequency weights; the
collection's sparse vector carries the IDF modifier, so the engine weighs each term by its
rarity in the collection at query time. Both engines get vectors made here, in the process that
writes or searches, so an index moved between engines (a backup restored elsewhere) scores alike.

One tokenization serves English and Chinese in one index: the multilingual tokenizer segments
Chinese into words (a whitespace tokenizer would make a sentence one token) and splits Latin
text at word boundaries; the English stemmer and stop words only touch Latin-script tokens, and
Chinese function words (的, 了, 是, ...) are dropped as stop words. Chosen by measurement:
docs/benchmarks.md, "Search quality".
"""

from __future__ import annotations

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
SPARSE_MODEL = "bm25/multilingual+en-stem+en-zh-stop/1"


@lru_cache(maxsize=1)
def _model() -> Bm25:
    return Bm25(
        Bm25Config(
            tokenizer=TokenizerType.Multilingual,
            stemmer=SnowballParams(SnowballLanguage.English),
            stopwords=StopwordsSet(languages={Language.English, Language.Chinese}),
        )
    )


def document_vector(text: str) -> Sparse:
    v = _model().embed_document(text)
    return Sparse(list(v.indices), list(v.values))


def query_vector(text: str) -> Sparse:
    v = _model().embed_query(text)
    return Sparse(list(v.indices), list(v.values))
