"""Serving the HTTP API (and webhook delivery) inside a process that holds the resources:
the worker process with the embedded index, or `knowledgeops api`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from temporalio.client import Client

from knowledgeops.runtime.resources import Resources
from starter.http.access import check_exposure
from starter.http.app import create_app
from starter.http.runtime import Runtime
from starter.services.webhooks import WebhookDispatcher


class _QuietSignalsServer(uvicorn.Server):
    # The process owns SIGINT/SIGTERM and stops uvicorn itself.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiServer:
    def __init__(self, client: Client, resources: Resources, stop: asyncio.Event) -> None:
        self.settings = resources.settings
        check_exposure(self.settings)  # no open API beyond loopback
        self.runtime = Runtime.build(client, resources)
        self.stop_event = stop
        # Built here, so WEBHOOK_URLS without a usable secret stops start-up, not delivery.
        self.webhooks = WebhookDispatcher.from_settings(self.runtime.db, self.settings)
        # Bound here, so a port in use stops start-up with a message (uvicorn would log it and
        # raise SystemExit inside its task, leaving the rest of the process running).
        self._socket = _bind(self.settings.api_host, self.settings.api_port)
        self._server = _QuietSignalsServer(
            uvicorn.Config(create_app(self.runtime), log_level="warning")
        )

    def start(self) -> list[asyncio.Task[Any]]:
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(self._server.serve(sockets=[self._socket]))
        ]
        if self.webhooks is not None:
            # Returns only at stop: an error of one URL is retried inside, never raised here.
            tasks.append(asyncio.create_task(self.webhooks.run(self.stop_event)))
        return tasks

    def stop(self) -> None:
        self._server.should_exit = True


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise RuntimeError(f"the API cannot listen on {host}:{port}: {e}; check API_HOST") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise RuntimeError(
            f"the API cannot listen on {host}:{port} ({e.strerror}): stop the process using "
            "that port, or set API_PORT (or API_HOST) to another"
        ) from None
    return sock
