"""Public retrieval sets with relevance judgments, in BEIR's layout, and their measures.

    python -m bench.retrieval_sets convert KIND SOURCE OUT [--exclude FILE] [--simplified]
    python -m bench.retrieval_sets merge OUT SET_DIR [SET_DIR ...]

writes OUT/corpus.jsonl ({"_id", "title", "text"}), OUT/queries.jsonl ({"_id", "text"}) and
OUT/qrels/test.tsv (query-id, corpus-id, score). KIND:

- `squad`: a SQuAD-format JSON file (question -> the paragraph its answer is in), or a folder of
  the SQuAD explorer's article pages (`explore/1.1/dev/*.html` of rajpurkar/SQuAD-explorer,
  gh-pages: the JSON files are not in that repository's snapshots). `--exclude` drops the
  paragraphs of another SQuAD-format file (XQuAD's English paragraphs are SQuAD dev's, and
  XQuAD-zh is held back). DRCD and CMRC 2018 are in this format too; `--simplified` converts
  traditional Chinese (DRCD) to simplified with OpenCC.
- `cranfield`: the Cranfield collection's cran.all.1400, cran.qry and cranqrel (a folder);
  relevance grades 1 (complete answer) .. 4 (minimum interest) become gains 4 .. 1.

`merge` joins converted sets into one (ids prefixed by each set's folder name): a larger
corpus, where each question has more passages to be told apart from.

Nothing here downloads: where the sources come from is in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RetrievalSet:
    name: str
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: gain}


def load(folder: Path) -> RetrievalSet:
    corpus = {}
    for line in (folder / "corpus.jsonl").open(encoding="utf-8"):
        d = json.loads(line)
        corpus[str(d["_id"])] = (d.get("title") or "", d["text"])
    queries = {}
    for line in (folder / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    lines = (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0 and qid in queries:
            qrels.setdefault(qid, {})[did] = int(score)
    return RetrievalSet(folder.name, corpus, {q: queries[q] for q in qrels}, qrels)


def document_markdown(title: str, text: str) -> str:
    """A corpus entry as the file a user would import: its title as the heading."""
    return f"# {title}\n\n{text}\n" if title else f"{text}\n"


# -- measures ---------------------------------------------------------------------------------


def ndcg_at(ranked: Sequence[str], gains: dict[str, int], k: int = 10) -> float:
    dcg = sum(gains.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], gains: dict[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & set(gains)) / len(gains) if gains else 0.0


def documents_of(chunk_ranking: Iterable[str]) -> list[str]:
    """Chunks ranked -> their documents ranked (each at its best chunk's rank)."""
    seen: dict[str, None] = {}
    for d in chunk_ranking:
        seen.setdefault(d, None)
    return list(seen)


def measure(rankings: dict[str, list[str]], rs: RetrievalSet) -> tuple[float, float]:
    """(mean nDCG@10, mean Recall@100) over the set's queries; a query with no ranking counts 0."""
    n = len(rs.qrels)
    ndcg = sum(ndcg_at(rankings.get(q, []), g) for q, g in rs.qrels.items()) / n
    recall = sum(recall_at(rankings.get(q, []), g) for q, g in rs.qrels.items()) / n
    return ndcg, recall


# -- converters -------------------------------------------------------------------------------


def _squad_paragraphs(source: Path) -> Iterable[tuple[str, str, list[tuple[str, str]]]]:
    """(title, context, [(question id, question)]) of a SQuAD JSON file or explorer pages."""
    if source.is_dir():
        for page in sorted(source.glob("*.html")):
            if page.name == "index.html":
                continue
            s = page.read_text(encoding="utf-8")
            found = re.search(r'<h1 id="title">(.*?)</h1>', s)
            title = html.unescape(found.group(1)) if found else page.stem
            for seg in s.split('class="para-wrap"')[1:]:
                pre = re.search(r"<pre>(.*?)</pre>", seg, re.S)
                if pre is None:
                    continue
                qs = re.findall(
                    r'data-id="([0-9a-f]+)"><p> <strong class="question">(.*?)</strong>', seg, re.S
                )
                yield title, html.unescape(pre.group(1)), [(i, html.unescape(q)) for i, q in qs]
        return
    data = json.loads(source.read_text(encoding="utf-8"))["data"]
    for article in data:
        for p in article["paragraphs"]:
            qs = [(str(qa["id"]), qa["question"]) for qa in p["qas"] if qa.get("answers", [1])]
            yield article.get("title", ""), p["context"], qs


def convert_squad(
    source: Path, out: Path, exclude: Path | None = None, simplified: bool = False
) -> tuple[int, int]:
    skip = {c for _, c, _ in _squad_paragraphs(exclude)} if exclude else set()
    to_simple = None
    if simplified:
        import opencc  # type: ignore[import-not-found]

        to_simple = opencc.OpenCC("t2s").convert
    corpus: dict[str, tuple[str, str]] = {}
    by_text: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, str] = {}
    seen_questions: set[str] = set()
    for title, context, qs in _squad_paragraphs(source):
        if context in skip:
            continue
        if to_simple is not None:
            title, context = to_simple(title), to_simple(context)
            qs = [(i, to_simple(q)) for i, q in qs]
        did = by_text.setdefault(context, f"p{len(by_text)}")
        corpus[did] = (title, context)
        for qid, q in qs:
            q = " ".join(q.split())
            # A question asked of two paragraphs has no single right answer: dropped.
            if q and q not in seen_questions:
                seen_questions.add(q)
                queries[qid], qrels[qid] = q, did
    _write(out, corpus, queries, {q: {d: 1} for q, d in qrels.items()})
    return len(corpus), len(queries)


def convert_cranfield(source: Path, out: Path) -> tuple[int, int]:
    def records(path: Path) -> list[dict[str, str]]:
        recs: list[dict[str, str]] = []
        field = ""
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.startswith(".I "):
                recs.append({"id": line[3:].strip()})
                field = ""
            elif re.fullmatch(r"\.[TAWB]", line.strip()):
                field = line.strip()[1]
            elif recs and field:
                recs[-1][field] = (recs[-1].get(field, "") + " " + line.strip()).strip()
        return recs

    # Two of its documents have no text: nobody could import them, so they are left out
    # (with their judgments).
    corpus = {
        r["id"]: (r.get("T", ""), r.get("W", ""))
        for r in records(source / "cran.all.1400")
        if r.get("W", "").strip()
    }
    # cranqrel numbers queries 1..225 in file order; cran.qry's own numbers skip values.
    queries = {str(n): r.get("W", "") for n, r in enumerate(records(source / "cran.qry"), 1)}
    qrels: dict[str, dict[str, int]] = {}
    for line in (source / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and 1 <= int(parts[2]) <= 4 and parts[1] in corpus:
            qrels.setdefault(parts[0], {})[parts[1]] = 5 - int(parts[2])
    _write(out, corpus, {q: t for q, t in queries.items() if q in qrels}, qrels)
    return len(corpus), len(qrels)


def merge(out: Path, sets: Sequence[Path]) -> tuple[int, int]:
    corpus: dict[str, tuple[str, str]] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for folder in sets:
        rs, p = load(folder), folder.name
        corpus |= {f"{p}-{d}": doc for d, doc in rs.corpus.items()}
        queries |= {f"{p}-{q}": text for q, text in rs.queries.items()}
        qrels |= {f"{p}-{q}": {f"{p}-{d}": g for d, g in gs.items()} for q, gs in rs.qrels.items()}
    _write(out, corpus, queries, qrels)
    return len(corpus), len(queries)


def _write(
    out: Path,
    corpus: dict[str, tuple[str, str]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for did, (title, text) in corpus.items():
            f.write(json.dumps({"_id": did, "title": title, "text": text}, ensure_ascii=False))
            f.write("\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, docs in qrels.items():
            for did, gain in docs.items():
                f.write(f"{qid}\t{did}\t{gain}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("kind", choices=["squad", "cranfield"])
    c.add_argument("source", type=Path)
    c.add_argument("out", type=Path)
    c.add_argument("--exclude", type=Path)
    c.add_argument("--simplified", action="store_true")
    m = sub.add_parser("merge")
    m.add_argument("out", type=Path)
    m.add_argument("sets", nargs="+", type=Path)
    args = p.parse_args()
    if args.cmd == "merge":
        docs, queries = merge(args.out, args.sets)
    elif args.kind == "squad":
        docs, queries = convert_squad(args.source, args.out, args.exclude, args.simplified)
    else:
        docs, queries = convert_cranfield(args.source, args.out)
    print(f"{args.out}: {docs} documents, {queries} queries with judgments")


if __name__ == "__main__":
    main()
