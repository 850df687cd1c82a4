"""Domain events delivered as signed webhooks, in order, retried until accepted."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from knowledgeops.settings import Settings
from tests.conftest import EXAMPLES, running_api


class Receiver:
    """A webhook endpoint that refuses the first `fail_first` deliveries."""

    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.accepted: list[tuple[dict[str, str], bytes]] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.attempts += 1
                ok = receiver.attempts > receiver.fail_first
                if ok:
                    receiver.accepted.append((dict(self.headers), body))
                self.send_response(200 if ok else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


async def test_webhooks_are_signed_ordered_and_retried(settings: Settings) -> None:
    receiver = Receiver(fail_first=2)
    cfg = settings.model_copy(update={"webhook_urls": receiver.url, "webhook_secret": "s3cret"})
    try:
        async with running_api(cfg) as api:
            r = await api.http.post(
                "/v1/documents",
                files={"file": ("n.txt", (EXAMPLES / "spaced-repetition.txt").read_bytes())},
            )
            await api.wait_task(r.json()["task_id"])
            for _ in range(150):  # backoff 1 s + 2 s after the two refusals
                if len(receiver.accepted) >= 3:
                    break
                await asyncio.sleep(0.1)
    finally:
        receiver.server.shutdown()
    assert receiver.attempts == 2 + len(receiver.accepted)
    kinds = []
    for headers, body in receiver.accepted:
        # Computed here, not with the product's own function: a receiver's view.
        expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert headers["X-Knowledgeops-Signature"] == f"sha256={expected}"
        event = json.loads(body)
        assert headers["X-Knowledgeops-Event-Id"] == event["event_id"]
        kinds.append(event["event_type"])
    assert kinds == ["TaskEnqueued", "TaskStarted", "TaskCompleted"]
