"""A lean HTTP/1.1 load generator for upload benchmarks.

httpx spends ~1 core of Python per 10 uploads/s building multipart bodies: on a 2-core machine
the load generator itself would be the bottleneck. Here every request is built once, before
timing starts, and sent as raw bytes over keep-alive connections, so the client costs little
more than the kernel's loopback copy.

Two load shapes:
- closed loop: each client sends its next upload as soon as the previous one is answered
  (measures capacity; latency is then queueing: clients / throughput, Little's law);
- open loop: uploads arrive at a fixed total rate, spread over the clients; latency is counted
  from the scheduled send time, so a slow server cannot hide queueing (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass, field


def multipart_request(host: str, path: str, filename: str, body: bytes) -> bytes:
    boundary = uuid.uuid4().hex
    head = (
        f"--{boundary}\r\n"
        f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    payload = head + body + f"\r\n--{boundary}--\r\n".encode()
    headers = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    return headers + payload


@dataclass
class LoadResult:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def record(self, status: int, ms: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.latencies_ms.append(ms)

    def summary(self) -> str:
        lat = sorted(self.latencies_ms)
        q = statistics.quantiles(lat, n=100)
        rate = len(lat) / self.elapsed_s
        return (
            f"p50 {q[49]:.0f} ms, p90 {q[89]:.0f} ms, p99 {q[98]:.0f} ms, max {lat[-1]:.0f} ms; "
            f"{rate:.1f} uploads/s; statuses {self.statuses}"
        )


class _Closed(Exception):
    pass


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> int:
    writer.write(request)
    await writer.drain()
    status_line = await reader.readline()
    if not status_line:
        raise _Closed  # the server closed an idle keep-alive connection
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def run_load(
    host: str,
    port: int,
    requests: list[bytes],
    clients: int,
    rate: float | None = None,
) -> LoadResult:
    """Send every request once. `rate` None = closed loop; else open loop at `rate`/s."""
    result = LoadResult()
    start = time.perf_counter() + 0.2
    next_index = 0

    async def client() -> None:
        nonlocal next_index
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while next_index < len(requests):
                i = next_index
                next_index += 1
                due = start + i / rate if rate else time.perf_counter()
                if rate:
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                try:
                    status = await _exchange(reader, writer, requests[i])
                except (_Closed, ConnectionError):
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    status = await _exchange(reader, writer, requests[i])
                result.record(status, (time.perf_counter() - due) * 1000)
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    result.elapsed_s = time.perf_counter() - start
    return result
