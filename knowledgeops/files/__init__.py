"""Files the platform keeps: stored files by content hash, chunk files by version, OCR pages,
task outputs, and the working copy of them that each machine fetches from STORAGE_URL."""
