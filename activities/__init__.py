"""Temporal activity classes, one module per task type (or per resource they drive); each is
built once per worker from the shared `Resources`. Heavy code they drive lives in subpackages
(`ingest/`: parsing subprocess, chunking, indexing)."""
