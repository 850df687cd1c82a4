"""The live-version pointer of each document's chunks lives in the app database (SQLite here,
PostgreSQL in the PostgreSQL run): an installation's earlier `.live` files are still read, and
go with the document's next publish or delete."""

from __future__ import annotations

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.chunk_store import ChunkReader, ChunkWriter


def _version(settings: Settings, doc: str, version: str, text: str) -> None:
    writer = ChunkWriter(settings.chunks_dir, doc, version)
    writer.add(text, f"hash-{text}", None, None)
    writer.commit()


async def test_the_pointer_is_a_row_and_earlier_pointer_files_are_still_read(
    settings: Settings,
) -> None:
    db = await Database.open(settings)
    try:
        versions = LiveVersions(db, settings.chunks_dir)
        _version(settings, "old", "v1", "from before the database held pointers")
        (settings.chunks_dir / "old.live").write_text("v1")
        assert await versions.get("old") == "v1", "an earlier installation's pointer file"
        assert await versions.get("new") is None

        _version(settings, "old", "v2", "the re-import")
        await versions.put("old", "v2")
        assert await versions.get("old") == "v2"
        assert not (settings.chunks_dir / "old.live").exists(), "the file went with the publish"
        reader = ChunkReader(settings.chunks_dir, "old", await versions.get("old"))
        assert reader.read(0, 1)[0].text == "the re-import"
        reader.close()

        await versions.put("new", "v1")
        await versions.put("new", "v1")  # a retried publish: still one row
        assert await versions.documents() == {"old", "new"}
        await versions.delete("old")
        assert await versions.get("old") is None and await versions.documents() == {"new"}
    finally:
        await db.close()
    # Another process (here: another connection) sees what was written.
    again = await Database.open(settings, migrate=False)
    try:
        assert await LiveVersions(again, settings.chunks_dir).get("new") == "v1"
    finally:
        await again.close()
