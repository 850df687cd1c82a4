"""Hybrid ranking over the candidates of both lists: the best `limit` of them are the first
`limit` of the whole ranking, ties break by id, and a candidate one list lacks scores 0 there."""

from __future__ import annotations

import itertools
import random

import pytest

from knowledgeops.index.engine import Scored
from knowledgeops.index.fusion import Fusion, FusionConfig, fuse


def _lists(seed: int) -> tuple[list[Scored], list[Scored]]:
    rng = random.Random(seed)
    ids = [f"p{i:03d}" for i in range(60)]
    # Overlapping candidates, and scores drawn from few values: many ties.
    dense = [Scored(i, rng.choice([0.2, 0.5, 0.9])) for i in ids[:40]]
    keyword = [Scored(i, rng.choice([1.0, 3.0, 7.0])) for i in ids[25:]]
    return (
        sorted(dense, key=lambda s: -s.score),
        sorted(keyword, key=lambda s: -s.score),
    )


@pytest.mark.parametrize("method", list(Fusion))
def test_the_best_few_are_the_head_of_the_whole_ranking(method: Fusion) -> None:
    config = FusionConfig(method=method)
    for seed in range(20):
        dense, keyword = _lists(seed)
        ranked = fuse(dense, keyword, config)
        assert sorted(s.id for s in ranked) == sorted({s.id for s in [*dense, *keyword]})
        scores = [s.score for s in ranked]
        assert scores == sorted(scores, reverse=True)
        for a, b in itertools.pairwise(ranked):
            assert a.score > b.score or a.id < b.id, "a tie broken otherwise than by id"
        for limit in (1, 5, 10, len(ranked), len(ranked) + 5):
            assert fuse(dense, keyword, config, limit) == ranked[:limit]


def test_a_candidate_missing_from_one_list_scores_nothing_there() -> None:
    config = FusionConfig(method=Fusion.CONVEX, keyword_weight=0.8)
    dense = [Scored("both", 0.9), Scored("dense-only", 1.0), Scored("low", 0.1)]
    keyword = [Scored("both", 5.0), Scored("keyword-only", 4.0), Scored("low", 1.0)]
    ranked = {s.id: s.score for s in fuse(dense, keyword, config)}
    # Min-max normalised per list, weighted 0.2 dense / 0.8 keyword.
    assert ranked["dense-only"] == pytest.approx(0.2 * 1.0)
    assert ranked["keyword-only"] == pytest.approx(0.8 * 0.75)
    assert ranked["both"] == pytest.approx(0.2 * (0.8 / 0.9) + 0.8 * 1.0)
    assert max(ranked, key=lambda k: ranked[k]) == "both"
