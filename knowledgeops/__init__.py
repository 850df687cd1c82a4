"""The core that workflows, activities and starters share, one package per concern: contracts
and the registry at the bottom, then settings, model clients, kept files, the database, the
index, and the domains the activities call into (ingest, ocr, learning, documents, reports,
backup, cleanup, agent); `runtime` builds a process from them. See docs/architecture.md."""
