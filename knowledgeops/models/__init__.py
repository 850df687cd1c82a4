"""Model clients: chat (OpenAI-compatible), embedding (local or OpenAI-compatible), rerank, and
the Retry-After back-off they share."""
