"""How a search ranks: the contract shared by the HTTP API, the CLI and the agent's tool."""

from __future__ import annotations

import enum


class SearchMode(enum.StrEnum):
    # Both rankings fused (the default): meaning and exact words.
    HYBRID = "hybrid"
    # By embedding only: paraphrases and other languages, but weak on names and rare terms.
    DENSE = "dense"
    # BM25 only: the query's words, stemmed (English) or segmented (Chinese).
    KEYWORD = "keyword"
