"""`knowledgeops cards DOCUMENT_ID`: a document's review cards (GENERATE_REVIEW_CARD) with their
FSRS state, read from the app database (no index, no running worker needed)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from knowledgeops.config.settings import Settings
from starter.cli.common import add_command


def add_parser(sub: Any) -> None:
    cd = add_command(sub, "cards", "a document's review cards and their FSRS state")
    cd.add_argument("document_id", help="the document's id")
    cd.add_argument(
        "--limit", type=int, default=100, help="cards shown at most (default: %(default)s)"
    )
    cd.add_argument(
        "--offset", type=int, default=0, help="cards skipped first (default: %(default)s)"
    )
    cd.add_argument("--json", action="store_true", help="print the page of cards as JSON")


async def command(args: argparse.Namespace, settings: Settings) -> int:
    # Here, not at the top: every command builds this module's parser, few open the database.
    from knowledgeops.db.database import open_prepared
    from knowledgeops.db.review_cards import ReviewCards

    db = await open_prepared(settings)
    try:
        page = await ReviewCards(db).list(args.document_id, limit=args.limit, offset=args.offset)
    finally:
        await db.close()
    if args.json:
        print(json.dumps(page.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return 0
    if not page.items:
        print(f"no review cards for {args.document_id} (start GENERATE_REVIEW_CARD to make some)")
        return 0
    for c in page.items:
        print(f"[{c.kind}] chunk {c.source_chunk}  {c.state}, due {c.due:%Y-%m-%d %H:%M}")
        print(f"    Q: {c.front}")
        print(f"    A: {c.back}")
    print(f"{len(page.items)} of {page.total} cards")
    return 0
