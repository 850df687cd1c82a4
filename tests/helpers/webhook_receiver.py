"""A webhook endpoint for tests: a local HTTP server that records each delivery, verifies it
with the endpoint's secret as a real receiver would (the Standard Webhooks library), and answers
as the test scripts it."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True)
class Delivery:
    """One request as the receiver got it."""

    headers: dict[str, str]
    body: bytes
    # The receiver's clock when it arrived (time.time()), and what the receiver answered.
    arrived: float
    status: int

    @property
    def event_id(self) -> str:
        return str(json.loads(self.body)["event_id"])


class Receiver:
    """A webhook endpoint answering each delivery with `answer(event_id, attempt number)`.
    Given the endpoint's secret it verifies each request as it arrives, as a receiver does
    (the off-the-shelf Standard Webhooks library), and refuses one that fails (401)."""

    def __init__(
        self, answer: Callable[[str, int], int] = lambda _id, _n: 200, secret: str | None = None
    ) -> None:
        self.answer = answer
        self.verifier = Webhook(secret) if secret is not None else None
        self.accepted: list[tuple[dict[str, str], bytes]] = []
        self.deliveries: list[Delivery] = []
        # Requests that failed verification, and why.
        self.refused: list[str] = []
        self.attempts: Counter[str] = Counter()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                arrived = time.time()
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                event_id = json.loads(body)["event_id"]
                receiver.attempts[event_id] += 1
                try:
                    if receiver.verifier is not None:
                        receiver.verifier.verify(body, headers)
                    status = receiver.answer(event_id, receiver.attempts[event_id])
                except WebhookVerificationError as e:
                    receiver.refused.append(f"{event_id}: {e}")
                    status = 401
                receiver.deliveries.append(Delivery(headers, body, arrived, status))
                if status == 200:
                    receiver.accepted.append((headers, body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def kinds(self) -> list[str]:
        return [json.loads(body)["event_type"] for _, body in self.accepted]
