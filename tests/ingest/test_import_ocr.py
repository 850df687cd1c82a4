"""DOCUMENT_IMPORT of scans and images: pages without a text layer go to OCR_PROCESS as a child
task, and their text becomes searchable like any other (real dev server, local embedder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from starter.services.search import search
from tests.helpers.documents import write_pdf
from tests.helpers.environment import Env
from tests.helpers.ocr_pages import (
    ENGLISH,
    accuracy,
    cjk_font,
    page_lines,
    render_lines,
    write_scan_pdf,
)

WAIT = 240.0
FONT = cjk_font()
pytestmark = pytest.mark.skipif(FONT is None, reason="the dev extra paperang-p2-fonts-cjk")


async def test_scanned_pdf_and_image_become_searchable(env: Env, tmp_path: Path) -> None:
    assert FONT is not None
    scan = write_scan_pdf(tmp_path / "scan.pdf", 2, FONT)
    image = tmp_path / "note.png"
    render_lines(page_lines(7), FONT).save(image)
    # A PDF with a text layer does not go to OCR.
    text_pdf = write_pdf(tmp_path / "text.pdf", ["Aquifers hold groundwater between rocks."])

    refs = {p.name: await env.documents.import_file(p) for p in (scan, image, text_pdf)}
    done = {n: await env.service.wait(r.task_id, timeout=WAIT) for n, r in refs.items()}
    for name, st in done.items():
        assert st.status == "completed", (name, st.last_error)
    scanned, img, plain = (done[n].result or {} for n in ("scan.pdf", "note.png", "text.pdf"))
    assert (scanned["ocr_pages"], scanned["pages"]) == (2, 2)
    assert (img["ocr_pages"], img["format"]) == (1, "png")
    assert plain["ocr_pages"] == 0 and plain["ocr_task_id"] is None

    # The OCR ran as its own task, visible by id.
    child = await env.service.get_status(scanned["ocr_task_id"])
    assert (child.task_type, child.status) == ("OCR_PROCESS", "completed")
    assert child.result is not None and child.result["pages"] == [1, 2]

    # The scan's page 2 text is indexed with its page number and found by search.
    hits = await search(env.store, env.embedder, ENGLISH[2 % len(ENGLISH)], k=3)
    top = hits[0]
    assert (top.document_id, top.page) == (refs["scan.pdf"].document_id, 2)
    assert accuracy(top.text, "\n".join(page_lines(2))) >= 0.95, top.text
    # Chinese too, from the image.
    hits = await search(env.store, env.embedder, page_lines(7)[0], k=3)
    assert hits[0].document_id == refs["note.png"].document_id
    assert accuracy(hits[0].text, "\n".join(page_lines(7))) >= 0.95, hits[0].text
