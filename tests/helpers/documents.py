"""Files for tests, generated in temporary directories (never downloaded), and reading
what became of them."""

from __future__ import annotations

import random
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.db.database import Database
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.chunk_store import sections_file
from knowledgeops.ingest.parse_runner import run_chunk, run_parse
from knowledgeops.ingest.parser_process import ParserLimits
from starter.services.task_models import TaskStatus
from tests.helpers.environment import Env


def numbered_paragraphs(n: int, words: int = 40) -> str:
    """n unique paragraphs; every chunk text differs, so embedding counts are exact."""
    vocab = ["river", "forest", "mountain", "cloud", "engine"]
    vocab += ["signal", "garden", "theory", "market", "harbor"]
    paras = []
    for i in range(n):
        body = " ".join(vocab[(i * 7 + j * 3) % len(vocab)] for j in range(words))
        paras.append(f"Paragraph {i} of the generated corpus. {body}.")
    return "\n\n".join(paras) + "\n"


def varied_paragraphs(n: int, seed: int = 0) -> list[str]:
    """n unique paragraphs of 20 to 160 words, as a real document's vary (seeded)."""
    rng = random.Random(seed)
    vocab = "river forest mountain cloud engine signal garden theory market harbor".split()
    vocab += "sediment delta crane lane bridge tide valley glacier spring meadow".split()
    return [
        f"Paragraph {i}: " + " ".join(rng.choice(vocab) for _ in range(rng.randint(20, 160))) + "."
        for i in range(n)
    ]


def edited_copy(paragraphs: list[str]) -> list[str]:
    """The paragraphs with one inserted near the start and the middle one rewritten."""
    edited = list(paragraphs)
    edited[len(edited) // 2] = "A rewritten paragraph about harbour cranes and shipping lanes."
    edited.insert(3, "An inserted paragraph about river deltas and the sediment they carry.")
    return edited


def write_pdf(path: Path, pages: list[str], *, password: str | None = None) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    if password:
        pdf.set_encryption(owner_password=password + "-owner", user_password=password)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def write_docx(path: Path, sections: list[tuple[str, str]]) -> Path:
    import docx

    d = docx.Document()
    for heading, body in sections:
        d.add_heading(heading, 1)
        d.add_paragraph(body)
    d.save(str(path))
    return path


def write_zip_bomb_docx(path: Path, inflated_mb: int = 600) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", "<w:document/>")
        chunk = b"\0" * (1024 * 1024)
        with z.open("word/media/bomb.bin", "w", force_zip64=True) as f:
            for _ in range(inflated_mb):
                f.write(chunk)
    return path


@dataclass
class Parsed:
    format: str
    total_chunks: int
    characters: int
    pages: int | None
    title: str | None


async def parse_into_chunks(
    path: Path,
    filename: str,
    chunks_dir: Path,
    options: ChunkingOptions,
    memory_mb: int = 1024,
    limits: ParserLimits | None = None,
    *,
    max_chunks: int | None = None,
) -> Parsed:
    """The import's parse and chunk steps, in process (no Temporal), as version "v1" of
    document "doc1", so `ChunkReader(chunks_dir, "doc1", "v1")` reads the result."""
    sections = sections_file(chunks_dir, "doc1", "v1")
    parsed = await run_parse(path, filename, "doc1", sections, memory_mb, limits)
    total = await run_chunk(
        sections, filename, "doc1", "v1", chunks_dir, options, parsed.format == "md",
        memory_mb, limits, max_chunks,
    )  # fmt: skip
    return Parsed(parsed.format, total, parsed.characters, parsed.pages, parsed.title)


def heavy_markdown(path: Path, mb: int = 12) -> Path:
    para = "## Section {i}\n\n" + "Words that the splitter must tokenize one by one. " * 40 + "\n\n"
    with path.open("w") as f:
        i = 0
        while f.tell() < mb * 1024 * 1024:
            f.write(para.format(i=i))
            i += 1
    return path


def upload(path: Path, name: str | None = None, **form: str) -> dict[str, Any]:
    """The keyword arguments of an httpx `post("/v1/documents", ...)` uploading `path` (as
    `name` if given) with these form fields."""
    return {"files": {"file": (name or path.name, path.read_bytes())}, "data": form}


async def live_version_of(settings: Settings, document_id: str) -> str | None:
    """The document's live chunk version, as the app database says."""
    db = await Database.open(settings, migrate=False)
    try:
        return await LiveVersions(db, settings.chunks_dir).get(document_id)
    finally:
        await db.close()


async def import_and_wait(env: Env, path: Path, **kw: object) -> TaskStatus:
    """Import a file through the document service and wait (90 s at most) until it closes."""
    ref = await env.documents.import_file(path, **kw)  # type: ignore[arg-type]
    return await env.service.wait(ref.task_id, timeout=90.0)
