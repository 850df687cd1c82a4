"""Sentence centrality: which sentences carry what a passage is about.

Each sentence's embedding is scored by its mean cosine similarity to the others (degree
centrality, as in LexRank): the sentences most like the rest state the passage's subject.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def most_central(vectors: Sequence[Sequence[float]], k: int) -> list[tuple[int, float]]:
    """(index, mean cosine similarity to the others) of the `k` most central vectors, most
    central first; a single vector scores 1.0 (it is all the passage says)."""
    if not vectors:
        return []
    if len(vectors) == 1:
        return [(0, 1.0)][:k]
    m = np.asarray(vectors, dtype=np.float64)
    m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    similarity = m @ m.T
    np.fill_diagonal(similarity, 0.0)
    scores = similarity.sum(axis=1) / (len(vectors) - 1)
    # Stable: equal scores keep the input order, so the choice is reproducible.
    order = sorted(range(len(vectors)), key=lambda i: (-float(scores[i]), i))
    return [(i, float(scores[i])) for i in order[:k]]
