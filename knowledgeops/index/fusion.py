"""Hybrid ranking: one list from the dense (meaning) and the keyword (BM25) candidates.

Measured, not assumed (docs/benchmarks.md, "Search quality"): a convex mix of min-max
normalised scores with the keyword side weighted more beat equal-weight reciprocal rank fusion
wherever the dense list was the weaker one, because RRF gives a weak list's top ranks as much
say as a strong list's. Fusion runs here, over the candidates both engines return for the
same query batch, so the embedded engine and a server rank identically.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from knowledgeops.index.engine import PointId, Scored


class Fusion(enum.StrEnum):
    CONVEX = "convex"
    RRF = "rrf"


@dataclass(frozen=True)
class FusionConfig:
    method: Fusion = Fusion.CONVEX
    # Share of the keyword list in the mix (convex) or its weight against the dense list's 1 - w
    # (rrf).
    keyword_weight: float = 0.8
    rrf_k: int = 60


def _normalised(hits: Sequence[Scored]) -> dict[PointId, float]:
    if not hits:
        return {}
    top = max(h.score for h in hits)
    low = min(h.score for h in hits)
    span = top - low
    # One candidate, or all equal: each is as good as the best.
    return {h.id: (h.score - low) / span if span > 0 else 1.0 for h in hits}


def fuse(
    dense: Sequence[Scored],
    keyword: Sequence[Scored],
    config: FusionConfig,
    limit: int | None = None,
) -> list[Scored]:
    """Both lists' candidates (the best `limit` of them), best first. A candidate missing from
    one list scores 0 there."""
    w = config.keyword_weight
    scores: dict[PointId, float] = {}
    if config.method == Fusion.RRF:
        for weight, hits in ((1 - w, dense), (w, keyword)):
            for rank, h in enumerate(hits):
                scores[h.id] = scores.get(h.id, 0.0) + weight / (config.rrf_k + rank + 1)
    else:
        for weight, norm in ((1 - w, _normalised(dense)), (w, _normalised(keyword))):
            for pid, s in norm.items():
                scores[pid] = scores.get(pid, 0.0) + weight * s
    n = len(scores) if limit is None else limit
    return [Scored(pid, s) for pid, s in heapq.nsmallest(n, scores.items(), key=_best_first)]


def _best_first(scored: tuple[PointId, float]) -> tuple[float, PointId]:
    # Ties break by id, so the order never depends on dictionary or engine order.
    return -scored[1], scored[0]
