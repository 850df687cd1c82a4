"""Small deterministic vectors for the index tests."""

from __future__ import annotations

import numpy as np

DIM = 8


def vec(i: int) -> list[float]:
    """A unit vector per i, pseudo-random: vec(i) is nearest to itself and to nothing else."""
    v = np.random.default_rng(i).standard_normal(DIM)
    return [float(x) for x in v / np.linalg.norm(v)]
