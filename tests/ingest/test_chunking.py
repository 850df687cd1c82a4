"""The chunk step: no chunk is a heading alone or a fragment of a few characters, and every
chunk carries its heading context into what search indexes (`Chunk.index_text`)."""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.errors import DocumentError
from knowledgeops.files.chunk_store import Chunk, ChunkReader, ChunkWriter
from knowledgeops.ingest.chunking import (
    MIN_CHUNK_CHARACTERS,
    Splitters,
    chunk_sections,
    write_chunks,
)
from knowledgeops.ingest.parsing import Section
from knowledgeops.ingest.sections import extract_sections

# Small chunks, so short test documents still split into several pieces.
EN = ChunkingOptions(chunk_tokens=32, overlap_tokens=4)
# Chinese takes about 1.4 tokens a character: at 32 tokens every piece would be under the
# minimum, at 128 most.
ZH = ChunkingOptions(chunk_tokens=192, overlap_tokens=8)


def visible(text: str) -> str:
    """The text without markdown heading markers or surrounding whitespace."""
    return re.sub(r"(?m)^[ \t]*#+[ \t]*", "", text).strip()


def is_heading_only(text: str) -> bool:
    return all(line.lstrip().startswith("#") for line in text.splitlines() if line.strip())


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def check_chunks(chunks: list[Chunk], *, small_document: bool = False) -> None:
    """What every document's chunks must satisfy."""
    assert chunks
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        if not small_document:
            assert len(visible(c.text)) >= MIN_CHUNK_CHARACTERS, c.text
            assert not is_heading_only(c.text), c.text
        expected = f"{c.context}\n\n{c.text}" if c.context else c.text
        assert c.index_text == expected
        # The embedding cache is keyed by the hash of exactly what gets embedded.
        assert c.content_hash == sha(c.index_text)
        if c.heading:
            last = c.heading.split(" > ")[-1]
            if visible(c.text).startswith(last):
                assert c.context is None  # the text says it already
            else:
                assert c.context == c.heading
                assert c.index_text.startswith(c.heading + "\n\n")
            assert last in c.index_text
        else:
            assert c.context is None


def chunk_file(tmp_path: Path, name: str, text: str, options: ChunkingOptions) -> list[Chunk]:
    """Parse a real file and chunk its sections, as the parse and chunk steps do."""
    source = tmp_path / name
    source.write_text(text)
    sections = tmp_path / "doc.sections.jsonl"
    parsed = extract_sections(source, name, "doc", sections)
    total = chunk_sections(
        sections, tmp_path / "c", "doc", "v1", options, markdown=parsed.format == "md"
    )
    chunks = ChunkReader(tmp_path / "c", "doc", "v1").read(0, 10_000)
    assert total == len(chunks)
    return chunks


def chunk_list(
    tmp_path: Path, sections: list[Section], options: ChunkingOptions, markdown: bool = False
) -> list[Chunk]:
    writer = ChunkWriter(tmp_path / "c", "doc", "v1")
    write_chunks(sections, Splitters.create(options).sections(markdown), writer)
    writer.commit()
    return ChunkReader(tmp_path / "c", "doc", "v1").read(0, 10_000)


def raw_pieces(text: str, options: ChunkingOptions, markdown: bool = False) -> list[str]:
    """What the splitter alone makes of a text (the chunks before this step's merging)."""
    splitters = Splitters.create(options)
    return list((splitters.markdown if markdown else splitters.text).chunks(text))


def containing(chunks: list[Chunk], needle: str) -> Chunk:
    [chunk] = [c for c in chunks if needle in c.text]
    return chunk


GUIDE = """# Field guide to rivers

## Sources

### Springs

Springs form where groundwater reaches the surface, often at the foot of a hill where a layer
of rock that water cannot pass through meets the slope. Their flow changes little with the
seasons, so the streams they feed keep running through dry summers.

### Glaciers

Meltwater from glaciers feeds many large rivers in summer. As glaciers shrink, those rivers
first carry more water than before and then, once the ice is gone, much less than they did.

## Maps

See the survey sheets.

## Mouths

1.

Deltas grow where a river drops its sediment faster than the sea can carry it away. The
Nile and the Mississippi built theirs over thousands of years, one flood at a time.
"""


def test_markdown_headings_travel_with_the_text_under_them(tmp_path: Path) -> None:
    chunks = chunk_file(tmp_path, "guide.md", GUIDE, EN)
    check_chunks(chunks)
    # Without the merge step the splitter leaves headings and "1." on their own.
    raw = [p for s in re.split(r"(?m)^(?=#)", GUIDE) if s for p in raw_pieces(s, EN, True)]
    assert "# Field guide to rivers" in raw and "### Springs" in raw
    assert any(visible(p).endswith("\n1.") and len(visible(p)) < 20 for p in raw)
    springs = containing(chunks, "Springs form where")
    # The two headings above it (each a section of its own) come first in its text.
    assert springs.text.startswith("# Field guide to rivers\n\n## Sources\n\n### Springs")
    assert springs.heading == "Field guide to rivers > Sources > Springs"
    assert springs.index_text.startswith("Field guide to rivers > Sources > Springs\n\n")
    glaciers = containing(chunks, "Meltwater from glaciers")
    assert glaciers.heading == "Field guide to rivers > Sources > Glaciers"
    assert glaciers.text.startswith("### Glaciers") and glaciers.context is None
    # A section too small to stand alone goes with the one after it, as a leading fragment.
    maps = containing(chunks, "See the survey sheets.")
    assert maps.text.startswith("## Maps") and "Deltas grow" in maps.text
    assert maps.heading == "Field guide to rivers > Mouths"
    deltas = containing(chunks, "Deltas grow")
    assert "## Mouths\n\n1.\n\nDeltas grow" in deltas.text
    # Nothing the splitter made is lost: each of its pieces is inside some chunk.
    assert all(any(p in c.text for c in chunks) for p in raw)
    # A chunk that continues a section under its heading gets the path as context.
    assert all(c.heading for c in chunks)
    continued = [
        c for c in chunks if not visible(c.text).startswith((c.heading or "").split(" > ")[-1])
    ]
    assert continued and all(c.context == c.heading for c in continued)


WIKI = (
    "# 银花鲈鱼\n\n"
    "银花鲈鱼 （学名：'Lateolabrax maculatus'）是鲈形目鮨科花鲈属的一种鱼类，俗名花鲈、七星鲈。"
    "分布于中国沿海、朝鲜半岛及日本等地，栖息在近海和河口的咸淡水交汇处，也能进入江河的下游。"
    "体延长而侧扁，背部灰青色，体侧及背鳍上散布着黑色的小斑点，幼鱼的斑点尤其明显。"
    "以小鱼和甲壳类为食，体长可达一米，肉质鲜美，是重要的经济鱼类和养殖对象。"
    "每年秋冬季节，成熟的个体游向河口外的浅海产卵，受精卵随海流漂浮，孵化后的幼鱼再进入河口生长。"
    "由于生长快、适应盐度变化的能力强，银花鲈鱼在中国南北沿海都有池塘和网箱养殖，"
    "近年来的年产量已超过十万吨，是沿海渔民的重要收入来源之一。"
    "过度捕捞和河口环境的变化使部分海域的野生种群明显减少，一些地方因此设立了禁渔期和保护区。\n"
)


def test_chinese_wiki_paragraph_keeps_its_title(tmp_path: Path) -> None:
    raw = raw_pieces(WIKI, ZH, markdown=True)
    assert raw[0] == "# 银花鲈鱼" and len(raw) >= 3  # the splitter alone leaves the title bare
    chunks = chunk_file(tmp_path, "鲈鱼.md", WIKI, ZH)
    check_chunks(chunks)
    assert chunks[0].text.startswith("# 银花鲈鱼\n\n银花鲈鱼 （学名：")
    assert all(c.heading == "银花鲈鱼" for c in chunks)
    # The first chunk begins with the title; the others are indexed under it.
    assert chunks[0].context is None
    assert all(c.index_text.startswith("银花鲈鱼\n\n") for c in chunks[1:])
    assert all(any(p in c.text for c in chunks) for p in raw)


EN_SENTENCES = [
    f"Observation {i} records how the {w} river, swollen after the storm, carried its sediment"
    " downstream, past the old mill, and left a bar of sand at the bend."
    for i, w in enumerate(["northern", "eastern", "western", "southern", "upper", "lower"] * 3)
]
ZH_SENTENCES = [
    f"第{i}次观测记录了{w}的河流在暴雨之后如何把泥沙一路搬运到下游，并在河口附近慢慢沉积下来。"
    for i, w in enumerate(["北方", "东部", "西部", "南方", "上游", "下游"] * 3)
]


def _with_tail_fragment(body: str, tail: str, options: ChunkingOptions) -> tuple[str, list[str]]:
    """The start of `body` (cut after a comma or full stop), then `tail`, such that the
    splitter alone makes full pieces and one small last piece."""
    for cut in re.finditer(r"[,.，。]", body):
        text = body[: cut.end()] + tail
        raw = raw_pieces(text, options)
        full = all(len(visible(p)) >= MIN_CHUNK_CHARACTERS for p in raw[:-1])
        if (
            len(raw) >= 2
            and full
            and raw[-1].endswith(tail)
            and len(raw[-1]) < MIN_CHUNK_CHARACTERS
        ):
            return text, raw
    raise AssertionError("no text with a tail fragment found")


@pytest.mark.parametrize(
    ("sentences", "tail", "options"),
    [(EN_SENTENCES, " See also: deltas.", EN), (ZH_SENTENCES, "参见：三角洲。", ZH)],
    ids=["english", "chinese"],
)
def test_tail_fragment_joins_the_piece_before_it(
    tmp_path: Path, sentences: list[str], tail: str, options: ChunkingOptions
) -> None:
    text, raw = _with_tail_fragment(" ".join(sentences), tail, options)
    chunks = chunk_list(tmp_path, [Section(text, heading="River notes")], options)
    check_chunks(chunks)
    assert len(chunks) == len(raw) - 1
    last = chunks[-1]
    assert last.text.startswith(raw[-2]) and last.text.endswith(tail)
    # Pieces of one section join as the text was written (an overlap appears only once)...
    assert last.text in text
    # ...so the chunk outgrows the splitter's piece by at most the fragment.
    assert len(last.text) <= len(raw[-2]) + len(raw[-1]) + 2
    assert [c.text for c in chunks[:-1]] == raw[:-2]


def _page(n: int, sentences: int) -> str:
    return " ".join(
        f"Note p{n}-{k} says the aquifer under field {k}, north of the village, refilled"
        " slowly after the dry year, as the wells showed."
        for k in range(sentences)
    )


# Longer than MIN_CHUNK_CHARACTERS, still a heading only.
RIVERS = "Rivers, lakes and the wetlands between them: how surface water moves across the plain"


def test_pages_stay_apart_unless_a_piece_would_stand_alone(tmp_path: Path) -> None:
    # Page 2 ends in a fragment the splitter leaves on its own: it stays on page 2.
    page2, raw2 = _with_tail_fragment(_page(2, 8), " End of p2-notes.", EN)
    pages = [
        Section("Groundwater\n" + _page(1, 6), page=1, heading="Groundwater"),
        Section(page2, page=2, heading="Groundwater"),
        Section("12", page=3, heading="Groundwater"),  # a page with its number only
        Section(RIVERS, page=4, heading=RIVERS),  # a title page: its heading only
        Section(_page(5, 6), page=5, heading=RIVERS),
    ]
    assert all(len(raw_pieces(p.text, EN)) >= 2 for p in pages if p.page in (1, 2, 5))
    chunks = chunk_list(tmp_path, pages, EN)
    check_chunks(chunks)
    for c in chunks:
        on = {int(m) for m in re.findall(r"\bp(\d)-", c.text)}
        # Pages with text of their own never share a chunk; the chunk takes their page.
        assert on == {c.page}, (c.page, c.text)
    assert {c.page for c in chunks} == {1, 2, 5}
    assert [c.text for c in chunks if c.page == 2][-1].startswith(raw2[-2])
    # The page number and the title page went with a neighbour rather than stand alone.
    assert sum(re.search(r"(?m)^12$", c.text) is not None for c in chunks) == 1
    rivers = containing(chunks, "Note p5-0 ")
    assert rivers.page == 5 and rivers.heading == RIVERS
    assert rivers.text.index(RIVERS) < rivers.text.index("Note p5-0 ")
    first = chunks[0]
    assert first.text.startswith("Groundwater\n") and first.context is None
    assert all(c.context == "Groundwater" for c in chunks[1:] if c.page == 1)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("note.txt", "Buy milk.\n"),
        ("笔记.txt", "买牛奶。\n"),
        ("todo.md", "# Todo\n\nBuy milk.\n"),
        ("title.md", "# 只有标题\n"),
        ("two.md", "# A\n\nfirst\n\n## B\n\nsecond\n"),
    ],
)
def test_a_short_document_is_one_chunk(tmp_path: Path, name: str, text: str) -> None:
    chunks = chunk_file(tmp_path, name, text, EN)
    check_chunks(chunks, small_document=True)
    assert len(chunks) == 1
    words = re.findall(r"\w+", text)
    assert re.findall(r"\w+", chunks[0].text) == words


def test_chunking_streams_section_by_section(tmp_path: Path) -> None:
    splitters = Splitters.create(EN)
    writer = ChunkWriter(tmp_path / "c", "doc", "v1")
    behind: list[int] = []

    def sections() -> Iterator[Section]:
        for n in range(40):
            # Sections read so far minus chunks written: what the step holds back.
            behind.append(n - writer.count)
            yield Section(f"Section {n}. " + _page(n % 9, 1), heading=f"Part {n}")

    write_chunks(sections(), splitters.sections(markdown=False), writer)
    writer.commit()
    assert writer.count == 40 and max(behind) <= 1


def test_document_errors_are_kept(tmp_path: Path) -> None:
    blank = tmp_path / "blank.sections.jsonl"
    blank.write_text(json.dumps({"t": " \n\n ", "p": None, "s": None}) + "\n")
    with pytest.raises(DocumentError) as info:
        chunk_sections(blank, tmp_path / "c", "doc", "v1", EN, markdown=False)
    assert info.value.kind == "EmptyDocument"
    big = tmp_path / "big.sections.jsonl"
    big.write_text(
        "".join(json.dumps({"t": _page(n, 6), "p": n, "s": None}) + "\n" for n in range(1, 6))
    )
    with pytest.raises(DocumentError) as info:
        chunk_sections(big, tmp_path / "c", "doc", "v1", EN, markdown=False, max_chunks=3)
    assert info.value.kind == "DocumentTooLarge"
    assert not list((tmp_path / "c").glob("*")), "a failed chunk step leaves no files"
    assert chunk_sections(big, tmp_path / "c", "doc", "v1", EN, markdown=False) > 3


def test_context_is_stored_only_when_set_and_old_records_read(tmp_path: Path) -> None:
    writer = ChunkWriter(tmp_path, "doc", "v1")
    writer.add("## Heartbeats\n\nA heartbeat...", "h0", None, "Temporal > Heartbeats")
    writer.add("The next attempt resumes.", "h1", None, "Temporal > Heartbeats", "Temporal")
    writer.commit()
    records = [json.loads(line) for line in (tmp_path / "doc~v1.jsonl").read_text().splitlines()]
    assert "c" not in records[0] and records[1]["c"] == "Temporal"
    # A file written before chunks had a context: records without "c".
    lines = [
        json.dumps({"i": i, "t": t, "h": sha(t), "p": 1, "s": "Old"}).encode() + b"\n"
        for i, t in enumerate(["first old chunk", "second old chunk"])
    ]
    (tmp_path / "old.jsonl").write_bytes(b"".join(lines))
    offsets = array("Q", [0, len(lines[0]), len(lines[0]) + len(lines[1])])
    (tmp_path / "old.idx").write_bytes(offsets.tobytes())
    old = ChunkReader(tmp_path, "old", None).read(0, 10)
    assert [(c.text, c.context, c.index_text) for c in old] == [
        ("first old chunk", None, "first old chunk"),
        ("second old chunk", None, "second old chunk"),
    ]
    new = ChunkReader(tmp_path, "doc", "v1").read(0, 10)
    assert [c.context for c in new] == [None, "Temporal"]
    assert new[1].index_text == "Temporal\n\nThe next attempt resumes."
