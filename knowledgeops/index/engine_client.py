"""The embedded engine in a process of its own (INDEX_PROCESS): the worker's side.

`EngineClient` is an `Engine` whose calls run in the child (engine_process.py), which holds the
index and runs its background builder. A call waits on a socket, not on the interpreter lock,
so the worker's event loop and its other threads go on while the engine works. Each calling
thread has its own connection: the index's threads call at once, as they do in-process.

If the child dies (killed, out of memory) the calls in flight fail with IndexProcessError, and
the next call starts a new child: the index is on disk, and the activities' retries repeat what
failed.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.engine import (
    Engine,
    EnginePoint,
    IndexLockedError,
    Kind,
    PointFilter,
    PointId,
    QuerySpec,
    Record,
    Scored,
)
from knowledgeops.index.engine_process import CLOSE, KEY_VARIABLE

log = logging.getLogger(__name__)

START_TIMEOUT = 120.0  # opening a large index replays its write-ahead logs


class IndexProcessError(RuntimeError):
    """The index's process is gone or never started."""


class EngineClient(Engine):
    local = True  # one process (this one, through its child) owns the index folder

    def __init__(self, root: Path, build: BuildSettings | None = None, *, builder: bool = True):
        self.root = root
        self.build = build or BuildSettings()
        self._builder = builder
        self._guard = threading.Lock()
        self._threads = threading.local()
        self._generation = 0  # which child a thread's connection belongs to
        self._connections: list[Connection] = []
        # What `aliased` answered, and a count of the changes begun and ended (see `_change`).
        self._aliased: dict[str, tuple[str, dict[str, Any]] | None] = {}
        self._changes = 0
        self._alias_guard = threading.Lock()
        self._created: set[str] = set()  # collections this client made or found made
        self._sparse: set[str] = set()  # of those, the ones found with keyword vectors
        self._folder = Path(tempfile.mkdtemp(prefix="ko-index-"))
        self._child: subprocess.Popen[bytes] | None = None
        self._key = b""
        # Children are started from this one thread, alive as long as the client: Linux sends
        # the child its parent-death signal (process_guard) when the *thread* that started it
        # ends, and the index's pool threads end at close, before the child is asked to.
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-process")
        try:
            self._start()
        except BaseException:
            self._starter.shutdown()
            shutil.rmtree(self._folder, ignore_errors=True)
            raise

    # -- the child --------------------------------------------------------------------------

    def _start(self) -> None:
        self._starter.submit(self._spawn).result()

    def _spawn(self) -> None:
        self._key = secrets.token_bytes(32)
        address = str(self._folder / f"engine-{self._generation}.sock")
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "knowledgeops.index.engine_process",
                str(self.root),
                json.dumps(asdict(self.build)),
                address,
                *(["--build"] if self._builder else []),
            ],
            stdout=subprocess.PIPE,
            env={**os.environ, KEY_VARIABLE: self._key.hex()},
        )
        assert child.stdout is not None
        line = child.stdout.readline()
        child.stdout.close()
        try:
            said = json.loads(line) if line else {}
        except ValueError:
            said = {}
        if not said.get("ready"):
            child.wait(timeout=START_TIMEOUT)
            if said.get("error") == IndexLockedError.__name__:
                raise IndexLockedError(said["message"])
            raise IndexProcessError(
                f"the index process did not start (exit code {child.returncode}): "
                f"{said.get('message', 'see the log above')}"
            )
        self._child = child
        self._address = address

    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self._threads, "conn", None)
        if conn is not None and self._threads.generation == self._generation:
            return conn
        with self._guard:
            if self._child is None:
                raise IndexProcessError("the index is closed")
            if self._child.poll() is not None:
                log.error(
                    "the index process exited (code %s); starting a new one",
                    self._child.returncode,
                )
                self._drop_connections()
                self._generation += 1
                self._start()
            conn = Client(self._address, "AF_UNIX", authkey=self._key)
            self._connections.append(conn)
            self._threads.conn, self._threads.generation = conn, self._generation
        return conn

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            conn = self._connection()
            conn.send((name, args, kwargs))
            ok, value = conn.recv()
        except (EOFError, OSError) as exc:
            self._threads.conn = None
            raise IndexProcessError(
                f"the index process stopped during {name} ({exc!r}); the next call starts a "
                "new one, and a retry repeats this one"
            ) from None
        if not ok:
            raise value
        return value

    def _drop_connections(self) -> None:
        for conn in self._connections:
            conn.close()
        self._connections.clear()

    def close(self) -> None:
        with self._guard:
            child, self._child = self._child, None
            if child is not None and child.poll() is None:
                try:
                    with Client(self._address, "AF_UNIX", authkey=self._key) as conn:
                        conn.send((CLOSE, (), {}))
                        conn.recv()
                    child.wait(timeout=60)
                except (OSError, EOFError, subprocess.TimeoutExpired) as exc:
                    log.error("the index process did not close (%r); killing it", exc)
                    child.kill()
                    child.wait()
            self._drop_connections()
        self._starter.shutdown()
        shutil.rmtree(self._folder, ignore_errors=True)

    # -- the Engine interface ---------------------------------------------------------------

    def collections(self) -> list[str]:
        result: list[str] = self._call("collections")
        return result

    def exists(self, name: str) -> bool:
        # Every search asks (and whether it has keyword vectors, below): answered here, a
        # search makes two trips to the child instead of four. A collection exists until this
        # process drops it.
        return self._once_true(self._created, "exists", name)

    def create(
        self, name: str, kind: Kind, dimension: int, metadata: dict[str, Any] | None = None
    ) -> None:
        # Every write asks first (IndexBase.ensure), and a create of an existing collection
        # changes nothing: answered here, so writes do not make searches ask `aliased` anew.
        if name in self._created:
            return
        self._change("create", name, kind, dimension, metadata)
        self._created.add(name)

    def drop(self, name: str) -> bool:
        self._created.discard(name)
        self._sparse.discard(name)
        return bool(self._change("drop", name))

    def dimension(self, name: str) -> int:
        return int(self._call("dimension", name))

    def has_sparse(self, name: str) -> bool:
        # Fixed for a collection's life (a re-index makes a new one).
        return self._once_true(self._sparse, "has_sparse", name)

    def _once_true(self, known: set[str], call: str, name: str) -> bool:
        """The child's yes to `call`, remembered in `known` until this process drops `name`."""
        if name in known:
            return True
        found = bool(self._call(call, name))
        if found:
            known.add(name)
        return found

    def metadata(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("metadata", name)
        return result

    def set_metadata(self, name: str, metadata: dict[str, Any]) -> None:
        self._change("set_metadata", name, metadata)

    def alias(self, alias: str) -> str | None:
        result: str | None = self._call("alias", alias)
        return result

    def set_alias(self, alias: str, collection: str | None) -> None:
        self._change("set_alias", alias, collection)

    def aliased(self, alias: str) -> tuple[str, dict[str, Any]] | None:
        """Every search asks, on the event loop (IndexBase.aliased): answered from what the
        child said last, so a search seldom waits on the socket for it. Only this process
        changes aliases and metadata (`_change`), and an answer is kept only if no change
        began or ended while it was asked."""
        with self._alias_guard:
            if alias in self._aliased:
                return self._aliased[alias]
            changes = self._changes
        result: tuple[str, dict[str, Any]] | None = self._call("aliased", alias)
        with self._alias_guard:
            if changes == self._changes:
                self._aliased[alias] = result
        return result

    def _change(self, name: str, *args: Any) -> Any:
        """A call that may change what `aliased` answers: what was kept is forgotten before
        and after it."""
        with self._alias_guard:
            self._changes += 1
            self._aliased.clear()
        try:
            return self._call(name, *args)
        finally:
            with self._alias_guard:
                self._changes += 1
                self._aliased.clear()

    def upsert(self, name: str, points: Sequence[EnginePoint]) -> None:
        self._call("upsert", name, list(points))

    def retrieve(
        self, name: str, ids: Sequence[PointId], *, payload: bool, dense: bool
    ) -> list[Record]:
        result: list[Record] = self._call("retrieve", name, list(ids), payload=payload, dense=dense)
        return result

    def count(self, name: str, flt: PointFilter | None) -> int:
        return int(self._call("count", name, flt))

    def delete(self, name: str, flt: PointFilter) -> None:
        self._call("delete", name, flt)

    def set_payload(self, name: str, flt: PointFilter, payload: dict[str, Any]) -> None:
        self._call("set_payload", name, flt, payload)

    def delete_payload(self, name: str, flt: PointFilter, keys: Sequence[str]) -> None:
        self._call("delete_payload", name, flt, list(keys))

    def scroll(
        self,
        name: str,
        offset: PointId | None,
        limit: int,
        *,
        fields: Sequence[str] | None,
        dense: bool,
    ) -> tuple[list[Record], PointId | None]:
        result: tuple[list[Record], PointId | None] = self._call(
            "scroll",
            name,
            offset,
            limit,
            fields=list(fields) if fields is not None else None,
            dense=dense,
        )
        return result

    def query(
        self, name: str, specs: Sequence[QuerySpec], flt: PointFilter | None
    ) -> list[list[Scored]]:
        result: list[list[Scored]] = self._call("query", name, list(specs), flt)
        return result

    def has_room(self, collection: str, key: str | None) -> bool:
        return bool(self._call("has_room", collection, key))

    def unindexed(self) -> dict[str, int]:
        result: dict[str, int] = self._call("unindexed")
        return result
