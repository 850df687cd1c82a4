"""A local OpenAI-compatible server for tests and benchmarks (real HTTP): embeddings and chat.

Embeddings (`/v1/embeddings`): deterministic vectors (a hash of the text), a record of every
input it embedded, and faults on demand: latency, 429 with Retry-After, 5xx, 401/404 and
hanging responses (timeouts).

Chat (`/v1/chat/completions`, models `fake-chat` and `fake-vision`; its own faults and
counters, so chat traffic never changes what the embedding tests see): scripted answers and
faults, described in model_answers.py.

Rerank (`/rerank`, `/v1/rerank`, `/v2/rerank`; its own faults and counters too): the request
bodies and answer shapes of Cohere/Jina and TEI, scripted scores and faults, described in
model_answers.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from tests.helpers.model_answers import (
    ChatAnswer,
    ChatFault,
    Fault,
    as_answer,
    completion_body,
    default_chat_answer,
    default_rerank_scores,
    error_body,
    image_types,
)

ChatScript = Callable[[dict[str, Any]], "ChatAnswer | str | dict[str, Any] | list[Any]"]
# (query, documents) -> one score per document, or {index: score} for some of them.
RerankScript = Callable[[str, list[str]], "list[float] | dict[int, float]"]
RERANK_ROUTES = ("/rerank", "/v1/rerank", "/v2/rerank")


@dataclass
class FakeOpenAI:
    dim: int = 32
    # Another vector size for some models (a re-index to a new model changes it).
    dims: dict[str, int] = field(default_factory=dict)
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
    inputs_by_model: dict[str, list[str]] = field(default_factory=dict)
    requests: int = 0
    request_times: list[float] = field(default_factory=list)
    chat_models: tuple[str, ...] = ("fake-chat", "fake-vision")
    chat_script: ChatScript | None = None
    chat_latency: float = 0.0
    chat_faults: deque[ChatFault] = field(default_factory=deque)
    chat_fail_on: dict[int, ChatFault] = field(default_factory=dict)
    chat_requests: list[dict[str, Any]] = field(default_factory=list)
    chat_answered: list[dict[str, Any]] = field(default_factory=list)
    chat_images: list[str] = field(default_factory=list)
    chat_errors: list[str] = field(default_factory=list)
    rerank_models: tuple[str, ...] = ("fake-rerank",)
    rerank_auth: bool = True
    rerank_shape: str | None = None  # "cohere" / "tei": every route answers that way
    rerank_script: RerankScript | None = None
    rerank_faults: deque[Fault] = field(default_factory=deque)
    rerank_requests: list[dict[str, Any]] = field(default_factory=list)
    rerank_authorization: list[str | None] = field(default_factory=list)
    rerank_errors: list[str] = field(default_factory=list)
    # Requests `hold(kind, number)` picks ("embeddings" / "chat", 1-based per kind) wait at
    # a gate until `release()`: a test keeps one in flight exactly as long as it needs (a
    # cancel or a kill landing during a request), instead of guessing a latency.
    hold: Callable[[str, int], bool] | None = None
    in_flight: int = 0  # embedding and chat requests being answered now
    held: int = 0  # of them, waiting at the gate
    _gate: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _random: random.Random | None = None

    def release(self) -> None:
        """Open the gate: held requests go on, and none is held from now on."""
        self.hold = None
        self._gate.set()

    def _pass_gate(self, kind: str, number: int) -> None:
        hold = self.hold
        if hold is None or not hold(kind, number):
            return
        with self._lock:
            self.held += 1
        try:
            # Bounded: a test that never releases must not leave a server thread forever.
            self._gate.wait(timeout=300)
        finally:
            with self._lock:
                self.held -= 1

    @contextlib.contextmanager
    def _answering(self) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def embedding_settings(self) -> dict[str, str]:
        """The settings (environment names) that make the app embed with this server."""
        return {
            "EMBEDDING_PROVIDER": "openai",
            "EMBEDDING_MODEL": self.models[0],
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.api_key,
        }

    def vector(self, text: str, model: str = "") -> list[float]:
        return [float(x) for x in self.array(text, model)]

    def array(self, text: str, model: str = "") -> np.ndarray:
        """A unit vector determined by the text (and the model's dimension), cheap to make:
        the server must answer "at once" in throughput benchmarks."""
        dim = self.dims.get(model, self.dim)
        # Hash bytes as the coordinates: a third of the cost of a seeded generator's normal
        # draws (~12 vs ~30 us a vector of 512), and as far from any other text's vector.
        v = np.frombuffer(hashlib.shake_256(text.encode()).digest(2 * dim), dtype="<i2")
        result: np.ndarray = v.astype(np.float32)
        result /= np.linalg.norm(result)
        return result

    def encoded(self, text: str, body: dict[str, Any], b64: bool) -> str | list[float]:
        if b64:
            return base64.b64encode(self.array(text, body["model"]).tobytes()).decode()
        return self.vector(text, body["model"])

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

    @property
    def chat_calls(self) -> int:
        with self._lock:
            return len(self.chat_requests)

    @property
    def rerank_calls(self) -> int:
        with self._lock:
            return len(self.rerank_requests)

    def rerank_url(self, route: str = "/rerank") -> str:
        assert self._server is not None and route in RERANK_ROUTES
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{route}"

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as real endpoints: a new connection per request cost the client (the
            # worker under test) more than the request in throughput benchmarks.
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as real servers set it: headers and body go out in two writes, and
            # with Nagle the body waited for the client's delayed ACK, ~40 ms per request
            # (most of an API search's time in bench.search_latency, measured).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output readable

            def _send(
                self, status: int, body: dict[str, Any] | list[Any], headers: dict[str, str]
            ) -> None:
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
                with fake._answering():
                    self._post()

            def _post(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/").endswith("/chat/completions"):
                    status, answer, headers = fake._chat(body, self.headers.get("Authorization"))
                    return self._send(status, answer, headers)
                if self.path.rstrip("/") in RERANK_ROUTES:
                    status, reply, headers = fake._rerank(
                        self.path.rstrip("/"), body, self.headers.get("Authorization")
                    )
                    return self._send(status, reply, headers)
                with fake._lock:
                    fake.requests += 1
                    number = fake.requests
                    fake.request_times.append(time.monotonic())
                    fault = fake.fail_on.pop(fake.requests, None)
                    if fault is None and fake.faults:
                        fault = fake.faults.popleft()
                    if fault is None and fake.fault_rates:
                        fault = fake.random_fault()
                if not self.path.rstrip("/").endswith("/embeddings"):
                    return self._send(404, error_body("not found", "invalid_request_error"), {})
                if self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    return self._send(401, error_body("Incorrect API key", "invalid_api_key"), {})
                if body.get("model") not in fake.models:
                    return self._send(404, error_body("model not found", "model_not_found"), {})
                if fault is not None:
                    if fault.hang_seconds:
                        time.sleep(fault.hang_seconds)
                    headers = {}
                    if fault.retry_after is not None:
                        headers["Retry-After"] = str(fault.retry_after)
                    return self._send(
                        fault.status, error_body("injected fault", "server_error"), headers
                    )
                inputs = body.get("input")
                if isinstance(inputs, str):
                    inputs = [inputs]
                if not isinstance(inputs, list) or not inputs or len(inputs) > 2048:
                    return self._send(400, error_body("bad input", "invalid_request_error"), {})
                fake._pass_gate("embeddings", number)
                if fake.latency:
                    time.sleep(fake.latency)
                with fake._lock:
                    fake.inputs.extend(inputs)
                    fake.inputs_by_model.setdefault(body["model"], []).extend(inputs)
                # As OpenAI: base64 of little-endian float32 when asked (the SDK's default).
                b64 = body.get("encoding_format") == "base64"
                data = [
                    {
                        "object": "embedding",
                        "index": i,
                        "embedding": base64.b64encode(
                            fake.array(t, body["model"]).tobytes()
                        ).decode()
                        if b64
                        else fake.vector(t, body["model"]),
                    }
                    for i, t in enumerate(inputs)
                ]
                # About four characters a token, as OpenAI's rule of thumb: counting words
                # cost the instant server a tenth of its time in throughput benchmarks.
                tokens = sum(len(t) for t in inputs) // 4
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

    def _chat(
        self, body: dict[str, Any], authorization: str | None
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            self.chat_requests.append(body)
            n = len(self.chat_requests)
            fault = self.chat_fail_on.pop(n, None)
            if fault is None and self.chat_faults:
                fault = self.chat_faults.popleft()
        if authorization != f"Bearer {self.api_key}":
            return 401, error_body("Incorrect API key", "invalid_api_key"), {}
        if body.get("model") not in self.chat_models:
            return 404, error_body("model not found", "model_not_found"), {}
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, error_body("messages must be a non-empty list", "invalid_request_error"), {}
        try:
            images = image_types(messages)
        except ValueError as e:
            return 400, error_body(str(e), "invalid_request_error"), {}
        if fault is not None and not fault.malformed:
            if fault.hang_seconds:
                time.sleep(fault.hang_seconds)
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            return fault.status, error_body(fault.message, "server_error"), headers
        self._pass_gate("chat", n)
        if self.chat_latency:
            time.sleep(self.chat_latency)
        try:
            answer = as_answer(
                ChatAnswer(content='{"answer": "unterminated')
                if fault is not None
                else (self.chat_script or default_chat_answer)(body)
            )
        except Exception as e:  # the script's bug must show in the test, not hang the client
            with self._lock:
                self.chat_errors.append(f"{type(e).__name__}: {e}")
            return 500, error_body(f"chat script failed: {e}", "server_error"), {}
        with self._lock:
            self.chat_images.extend(images)
            self.chat_answered.append(body)
        return 200, completion_body(body, answer, n), {}

    def _rerank(
        self, route: str, body: Any, authorization: str | None
    ) -> tuple[int, dict[str, Any] | list[Any], dict[str, str]]:
        tei = (self.rerank_shape or ("tei" if route == "/rerank" else "cohere")) == "tei"

        def error(status: int, message: str) -> tuple[int, dict[str, Any], dict[str, str]]:
            # TEI's error body, or Cohere's.
            return (
                status,
                ({"error": message, "error_type": "fake"} if tei else {"message": message}),
                {},
            )

        with self._lock:
            self.rerank_requests.append(body if isinstance(body, dict) else {"body": body})
            self.rerank_authorization.append(authorization)
            fault = self.rerank_faults.popleft() if self.rerank_faults else None
        if self.rerank_auth and authorization != f"Bearer {self.api_key}":
            return error(401, "invalid api token")
        if not isinstance(body, dict):
            return error(422, "the body is not a JSON object")
        model = body.get("model")
        if route == "/v2/rerank" and not model:
            return error(400, "model is required")
        if model is not None and model not in self.rerank_models:
            return error(404, f"model '{model}' not found")
        documents = body.get("documents", body.get("texts"))
        query = body.get("query")
        if (
            not isinstance(query, str)
            or not isinstance(documents, list)
            or not documents
            or not all(isinstance(d, str) for d in documents)
        ):
            return error(422, "query must be a string, documents / texts a non-empty string list")
        if fault is not None:
            if fault.hang_seconds:
                time.sleep(fault.hang_seconds)
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            status, reply, _ = error(fault.status, "injected fault")
            return status, reply, headers
        try:
            scored = (self.rerank_script or default_rerank_scores)(query, documents)
        except Exception as e:  # the script's bug must show in the test, not hang the client
            with self._lock:
                self.rerank_errors.append(f"{type(e).__name__}: {e}")
            return error(500, f"rerank script failed: {e}")
        pairs = scored.items() if isinstance(scored, dict) else enumerate(scored)
        ranked = sorted(pairs, key=lambda p: (-p[1], p[0]))  # best first, as real servers
        if tei:
            return 200, [{"index": i, "score": s} for i, s in ranked], {}
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n > 0:
            ranked = ranked[:top_n]
        results = [{"index": i, "relevance_score": s} for i, s in ranked]
        return 200, {"id": f"rerank-{len(self.rerank_requests)}", "results": results}, {}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
