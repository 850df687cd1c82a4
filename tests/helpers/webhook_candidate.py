"""A process that delivers webhooks as an API process does (WebhookDispatcher.run), with a short
lease, for tests of who delivers: `python -m tests.helpers.webhook_candidate LEASE_SECONDS`,
settings (the database, WEBHOOK_URLS, WEBHOOK_SECRET) from the environment. SIGTERM stops it
cleanly (the lease released); it logs to stderr, "ready" once it is about to take part."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from knowledgeops.config.loading import load_settings
from knowledgeops.db.database import Database
from starter.services.webhooks import WebhookDispatcher


async def main(lease_seconds: float) -> None:
    settings = load_settings()
    # The test migrated the database: a second migrator would only contend for it.
    db = await Database.open(settings, migrate=False)
    dispatcher = WebhookDispatcher(
        db,
        settings.webhook_url_list(),
        settings.webhook_signing_key(),
        poll_seconds=0.05,
        first_backoff=0.05,
        lease_seconds=lease_seconds,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    logging.getLogger(__name__).info("ready: %s", dispatcher.keeper.lease.holder)
    try:
        await dispatcher.run(stop)
    finally:
        await db.close()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(created).3f %(name)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    asyncio.run(main(float(sys.argv[1])))
