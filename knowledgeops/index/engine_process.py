"""The embedded engine in a process of its own (INDEX_PROCESS): the child.

Every call of qdrant-edge-py holds the Python interpreter lock for as long as it runs (a search
of unindexed points ~0.3 s at 500,000 chunks, a flush, a build's swap; `bench.edge_gil`), and
while it does nothing else in the worker runs: not its event loop, not a one-page upload's
steps. Here the engine and its background builder run in a child, and the worker reaches them
through `EngineClient` (engine_client.py), one connection per calling thread.

    python -m knowledgeops.index.engine_process ROOT BUILD_SETTINGS_JSON SOCKET [--build]

The authentication key comes in KNOWLEDGEOPS_ENGINE_KEY (hex), not on the command line, which
any local user can read. The child says `{"ready": true}` (or `{"error": ..., "message": ...}`)
on stdout once the index is open, then serves each connection on a thread of its own until
asked to close or its parent dies.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.engine import Engine

log = logging.getLogger("knowledgeops.index.engine_process")

KEY_VARIABLE = "KNOWLEDGEOPS_ENGINE_KEY"
# What a client may call: the Engine interface (its public methods but close, which the client
# asks for with CLOSE), nothing else of the objects behind it.
CALLS = frozenset(
    name
    for name in dir(Engine)
    if not name.startswith("_") and callable(getattr(Engine, name)) and name != "close"
)
CLOSE = "close"


def serve_connection(engine: Engine, conn: Connection, closing: threading.Event) -> None:
    """Answer one client thread's calls, one after another: (True, result) or (False, the
    exception the engine raised), until the client hangs up or asks to close."""
    with conn:
        while True:
            try:
                name, args, kwargs = conn.recv()
            except (EOFError, OSError):
                return  # the client's thread or process is gone
            if name == CLOSE:
                closing.set()
                conn.send((True, None))
                return
            answer: tuple[bool, Any]
            if name not in CALLS:
                answer = (False, ValueError(f"the index process has no call {name!r}"))
            else:
                try:
                    answer = (True, getattr(engine, name)(*args, **kwargs))
                except Exception as exc:
                    answer = (False, exc)
            try:
                conn.send(answer)
            except (EOFError, OSError):
                return
            except Exception as exc:  # an exception that cannot be pickled: its text can
                conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))


def main(root: str, spec: str, address: str, build: bool) -> None:
    from knowledgeops.index.edge import EdgeEngine
    from knowledgeops.index.edge_builder import Builder
    from knowledgeops.process_guard import die_with_parent

    die_with_parent()
    # Ctrl-C reaches the whole process group: the worker then drains its tasks, which still
    # use the index, and closes it (or dies, and this process with it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s index-process %(levelname)s %(name)s: %(message)s"
    )
    key = bytes.fromhex(os.environ.pop(KEY_VARIABLE))
    try:
        engine = EdgeEngine(Path(root), BuildSettings(**json.loads(spec)))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        sys.exit(1)
    builder = Builder(engine) if build else None
    if builder is not None:
        builder.start()
    closing = threading.Event()
    listener = Listener(address, "AF_UNIX", authkey=key)
    print(json.dumps({"ready": True}), flush=True)
    # The parent reads only that line: anything written to stdout later goes to the log.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def accept() -> None:
        while not closing.is_set():
            try:
                conn = listener.accept()
            except OSError:
                return  # the listener was closed: shutting down
            except Exception:
                # A connection that failed authentication or hung up mid-handshake: the next one
                # may be fine.
                log.exception("the index process refused a connection")
                continue
            threading.Thread(
                target=serve_connection, args=(engine, conn, closing), daemon=True
            ).start()

    threading.Thread(target=accept, daemon=True, name="accept").start()
    closing.wait()
    listener.close()
    if builder is not None:
        builder.stop()
    engine.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], "--build" in sys.argv[4:])
