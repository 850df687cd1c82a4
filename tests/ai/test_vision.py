"""VISION_ANALYZE end to end on the real dev server: stored images and PDF pages read inside the
activity, OCR text included when OCR_PROCESS stored some, the local method with no model, and a
scripted vision model on the fake OpenAI server (image received, calls and tokens counted,
malformed answers)."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from knowledgeops.config.settings import Settings
from knowledgeops.files import file_store
from knowledgeops.files.ocr_results import OcrLine, OcrPage, OcrResults
from knowledgeops.files.outputs import OutputStore
from knowledgeops.storage.local import LocalStore
from starter.services.task_models import PayloadInvalidError
from tests.helpers.documents import write_pdf
from tests.helpers.environment import Env, chat_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import ChatFault, all_text, response_schema

WAIT = 90.0
TYPE = "VISION_ANALYZE"
OCR_TEXT = "Mitochondria produce ATP"


def _store(settings: Settings, path: Path) -> str:
    return file_store.store_path(settings.files_dir, path, 50 * 1024 * 1024)


def _two_colour_png(tmp_path: Path) -> Path:
    """200×100: the left three quarters red, the rest blue."""
    image = Image.new("RGB", (200, 100), (220, 30, 30))
    image.paste((30, 80, 220), (150, 0, 200, 100))
    path = tmp_path / "cell.png"
    image.save(path)
    return path


def _save_ocr(settings: Settings, file_id: str, page: int = 1) -> None:
    line = OcrLine(text=OCR_TEXT, box=[(0, 0), (10, 0), (10, 5), (0, 5)], score=0.99)
    OcrResults(settings.ocr_dir).save(
        OcrPage(file_id=file_id, page=page, method="test", width=200, height=100, lines=[line])
    )


async def _run(env: Env, payload: dict[str, Any]) -> Any:
    ref = await env.service.enqueue(TYPE, payload)
    return ref.task_id, await env.service.wait(ref.task_id, timeout=WAIT)


async def test_without_a_model_image_properties_and_ocr_text(env: Env, tmp_path: Path) -> None:
    s = env.settings
    png = _store(s, _two_colour_png(tmp_path))
    _save_ocr(s, png)
    task_id, st = await _run(env, {"file_id": png, "instruction": "What does the cell make?"})
    assert st.status == "completed", st.last_error
    r = st.result
    assert (r["method"], r["format"], r["width"], r["height"]) == (
        "local:image-properties",
        "png",
        200,
        100,
    )
    assert r["ocr_text_used"] and r["usage"]["calls"] == 0
    assert r["output_url"] == f"/v1/tasks/{task_id}/output"
    out = await OutputStore(LocalStore(s.data_dir)).load(task_id)
    colours = [(c["name"], c["share"]) for c in out["image"]["dominant_colours"]]
    assert colours == [("red", 0.75), ("blue", 0.25)], colours
    assert out["text_seen"] == out["ocr_text"] == OCR_TEXT
    assert out["answer"] is None and "200×100" in out["description"]

    # A PDF page, rendered (A4 at 144 dpi); and the second frame of a TIFF.
    pdf = _store(s, write_pdf(tmp_path / "two.pdf", ["First page.", "Second page."]))
    _, st = await _run(env, {"file_id": pdf, "page": 2})
    assert st.status == "completed", st.last_error
    assert (st.result["format"], st.result["width"], st.result["height"]) == ("pdf", 1191, 1684)
    assert not st.result["ocr_text_used"]
    frames = [Image.new("RGB", (40, 30), c) for c in ((0, 0, 0), (255, 255, 255))]
    tiff_path = tmp_path / "scan.tiff"
    frames[0].save(tiff_path, save_all=True, append_images=frames[1:])
    tiff = _store(s, tiff_path)
    task_id, st = await _run(env, {"file_id": tiff, "page": 2})
    assert st.status == "completed", st.last_error
    out = await OutputStore(LocalStore(s.data_dir)).load(task_id)
    assert out["image"]["pages"] == 2
    assert out["image"]["dominant_colours"][0]["name"] == "white"


async def test_bad_input_fails_at_once(env: Env, tmp_path: Path) -> None:
    s = env.settings
    text = tmp_path / "notes.txt"
    text.write_text("Not an image at all, just some words.\n")
    ref = await env.documents.import_file(text)
    assert (await env.service.wait(ref.task_id, timeout=WAIT)).status == "completed"
    pdf = _store(s, write_pdf(tmp_path / "one.pdf", ["Only page."]))
    png = _store(s, _two_colour_png(tmp_path))
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"document_id": ref.document_id}, "NotAnImage: file "),
        ({"document_id": "no-such-doc"}, "DocumentNotFound: no document with id 'no-such-doc'"),
        ({"file_id": "0" * 64 + ".png"}, "FileNotFound: no stored file"),
        ({"file_id": pdf, "page": 2}, "PageOutOfRange: file " + pdf + " has 1 page; page 2"),
        ({"file_id": png, "page": 2}, "PageOutOfRange"),
        ({"file_id": _store(s, broken)}, "CorruptImage"),
    ]
    for payload, error in cases:
        _, st = await _run(env, payload)
        assert st.status == "failed" and st.last_error.startswith(error), st.last_error
    for bad in ({}, {"file_id": png, "document_id": ref.document_id}):
        with pytest.raises(PayloadInvalidError, match="exactly one of file_id"):
            await env.service.enqueue(TYPE, bad)


def _analysis(body: dict[str, Any]) -> dict[str, Any]:
    schema = response_schema(body)
    assert schema is not None and set(schema["properties"]) >= {"description", "answer"}
    ocr_given = OCR_TEXT in all_text(body)
    return {
        "description": "A red cell with a blue nucleus.",
        "objects": ["cell", "nucleus"],
        "figures": [],
        "text_seen": OCR_TEXT if ocr_given else "",
        "answer": "ATP" if ocr_given else "I cannot tell.",
    }


def _sent_image(body: dict[str, Any]) -> Image.Image:
    for message in body["messages"]:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part.get("type") == "image_url":
                data = part["image_url"]["url"].split(",", 1)[1]
                return Image.open(io.BytesIO(base64.b64decode(data)))
    raise AssertionError("no image in the request")


async def test_with_a_vision_model(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = _analysis
    async with running_env(chat_settings(settings, fake_openai)) as env:
        s = env.settings
        png = _store(s, _two_colour_png(tmp_path))
        _save_ocr(s, png)
        # One malformed answer: re-asked by the client, both answers paid for.
        fake_openai.chat_faults.append(ChatFault(malformed=True))
        task_id, st = await _run(env, {"file_id": png, "instruction": "What does it make?"})
        assert st.status == "completed", st.last_error
        r = st.result
        assert r["method"] == "model:fake-vision" and r["ocr_text_used"]
        assert fake_openai.chat_calls == 2 and r["usage"]["calls"] == 2
        assert r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] > 0
        # The stored PNG went as it is.
        assert fake_openai.chat_images == ["image/png", "image/png"]
        assert fake_openai.chat_requests[0]["model"] == "fake-vision"
        assert _sent_image(fake_openai.chat_requests[0]).size == (200, 100)
        out = await OutputStore(LocalStore(s.data_dir)).load(task_id)
        assert (out["answer"], out["objects"], out["text_seen"]) == (
            "ATP",
            ["cell", "nucleus"],
            OCR_TEXT,
        )
        assert out["image"]["format"] == "png"  # the properties come with a model too

        # A large BMP: scaled to 2048 px and re-encoded (JPEG: no transparency) before sending.
        big = tmp_path / "wide.bmp"
        Image.new("RGB", (3000, 1000), (40, 160, 60)).save(big)
        _, st = await _run(env, {"file_id": _store(s, big)})
        assert st.status == "completed", st.last_error
        assert fake_openai.chat_images[-1] == "image/jpeg"
        assert _sent_image(fake_openai.chat_requests[-1]).size == (2048, 683)
        assert (st.result["width"], st.result["height"]) == (3000, 1000)

        # Malformed every time: fails at once after the client's bounded re-asks.
        calls = fake_openai.chat_calls
        fake_openai.chat_faults.extend(ChatFault(malformed=True) for _ in range(3))
        _, failed = await _run(env, {"file_id": png})
        assert failed.status == "failed" and failed.last_error.startswith("ChatAnswerInvalid:")
        assert fake_openai.chat_calls == calls + 3
