"""A local OpenAI-compatible embeddings server for tests and benchmarks (real HTTP).

Deterministic vectors (a hash of the text), a record of every input it embedded, and faults
on demand: latency, 429 with Retry-After, 5xx, 401/404 and hanging responses (timeouts).
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Fault:
    status: int = 500
    retry_after: float | None = None
    hang_seconds: float = 0.0  # > client timeout: the client sees a timeout


@dataclass
class FakeOpenAI:
    dim: int = 32
    api_key: str = "test-key"
    models: tuple[str, ...] = ("fake-embed",)
    latency: float = 0.0
    faults: deque[Fault] = field(default_factory=deque)
    # Faults by request number (1-based), e.g. fail the 3rd request after two good ones.
    fail_on: dict[int, Fault] = field(default_factory=dict)
    # Random faults by status, e.g. {429: 0.2, 500: 0.1} (seeded: a run can be repeated).
    fault_rates: dict[int, float] = field(default_factory=dict)
    seed: int = 7
    inputs: list[str] = field(default_factory=list)
    requests: int = 0
    request_times: list[float] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _random: random.Random | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def vector(self, text: str) -> list[float]:
        raw = b"".join(
            hashlib.sha256(f"{i}:{text}".encode()).digest() for i in range(self.dim * 4 // 32 + 1)
        )
        ints = struct.unpack(f"<{self.dim}i", raw[: self.dim * 4])
        vec = [x / 2**31 for x in ints]
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        return [v / norm for v in vec]

    def random_fault(self) -> Fault | None:
        if self._random is None:
            self._random = random.Random(self.seed)
        roll = self._random.random()
        for status, rate in sorted(self.fault_rates.items()):
            if roll < rate:
                return Fault(status, retry_after=0.5 if status == 429 else None)
            roll -= rate
        return None

    def duplicates(self) -> int:
        with self._lock:
            return len(self.inputs) - len(set(self.inputs))

    def embedded_count(self) -> int:
        with self._lock:
            return len(self.inputs)

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output readable

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up (timeout test)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests += 1
                    fake.request_times.append(time.monotonic())
                    fault = fake.fail_on.pop(fake.requests, None)
                    if fault is None and fake.faults:
                        fault = fake.faults.popleft()
                    if fault is None and fake.fault_rates:
                        fault = fake.random_fault()
                if not self.path.rstrip("/").endswith("/embeddings"):
                    return self._send(404, _err("not found", "invalid_request_error"), {})
                if self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    return self._send(401, _err("Incorrect API key", "invalid_api_key"), {})
                if body.get("model") not in fake.models:
                    return self._send(404, _err("model not found", "model_not_found"), {})
                if fault is not None:
                    if fault.hang_seconds:
                        time.sleep(fault.hang_seconds)
                    headers = {}
                    if fault.retry_after is not None:
                        headers["Retry-After"] = str(fault.retry_after)
                    return self._send(fault.status, _err("injected fault", "server_error"), headers)
                inputs = body.get("input")
                if isinstance(inputs, str):
                    inputs = [inputs]
                if not isinstance(inputs, list) or not inputs or len(inputs) > 2048:
                    return self._send(400, _err("bad input", "invalid_request_error"), {})
                if fake.latency:
                    time.sleep(fake.latency)
                with fake._lock:
                    fake.inputs.extend(inputs)
                data = [
                    {"object": "embedding", "index": i, "embedding": fake.vector(t)}
                    for i, t in enumerate(inputs)
                ]
                tokens = sum(len(t.split()) for t in inputs)
                return self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                    },
                    {},
                )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _err(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code}}
