"""The HTTP API (FastAPI): public routes under /v1, admin routes under /v1/admin."""
