"""A pool of warm parser processes (`knowledgeops.ingest.parser_process --serve`).

Starting a Python process with the parsing libraries costs ~0.24 s of CPU, more than parsing
a one-chunk note. So parser processes are kept and reused, one per parse running at once
(the worker runs PARSER_CONCURRENCY parses plus the express parser of small documents), each
serving one job at a time, with the isolation a fresh process had:
- the memory cap (RLIMIT_AS) is set when a process starts, and processes are kept apart by it
  (and by command, environment and working directory): a job only runs where it would have;
- the CPU limit is renewed by the process before each job (parser_process.limit_cpu);
- a job over its wall-clock limit, or cancelled, kills its process at once;
- a process is never reused after an answer that is not "ok" (a document error, or anything
  that might leave a parser in a strange state), after it died, or after MAX_JOBS jobs.

The blocking pipe I/O runs in two threads per process (requests and answers; stderr, drained
all the time so a chatty parser never blocks on a full pipe), not on an event loop: the pool
serves any loop, and the tests start a new one per `asyncio.run`. Processes are started on
the caller's thread (the event loop's): PR_SET_PDEATHSIG kills a child when the *thread*
that started it ends, and the worker's loop thread lives as long as the worker.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, Any

from knowledgeops.ingest.parser_process import ParserInput
from knowledgeops.observability import metrics

log = logging.getLogger("knowledgeops.parser")

# A process serves at most this many jobs, then a fresh one takes over: what parsing
# libraries cache or leak, and heap fragmentation, stay bounded. At ~0.24 s per start this
# costs < 3 ms per job.
MAX_JOBS = 100
# A process idle this long is closed: a burst of imports does not keep its parsers (~100 MB
# each) resident for the rest of the day.
IDLE_SECONDS = 300.0
# What is kept of a job's stderr, for the log (a hostile file can make a parser write GBs).
STDERR_KEEP = 8 * 1024
# An answer is one short JSON line; anything longer is not ours.
ANSWER_LIMIT = 1024 * 1024
# How long closing waits for a killed process's threads (they end as soon as it is gone).
_JOIN_SECONDS = 5.0

_Key = tuple[tuple[str, ...], tuple[tuple[str, str], ...], int, str]


@dataclass(frozen=True)
class Outcome:
    """How one job ended."""

    pid: int
    # The answer, if the process gave a readable JSON object.
    answer: dict[str, Any] | None = None
    # The answer line as received (for the log when it is not readable); b"" if none came.
    line: bytes = b""
    # The exit status if the process ended during the job (negative: killed by that signal).
    returncode: int | None = None
    # The pool killed it after the job's wall-clock limit.
    timed_out: bool = False
    # The end of what it wrote to stderr during the job.
    stderr: bytes = b""
    # Jobs the process had run, this one included (1: a fresh process).
    jobs: int = 1


class WarmProcess:
    """One parser process and the two threads that talk to it."""

    def __init__(self, key: _Key, command: Sequence[str], env: Mapping[str, str]) -> None:
        self.key = key
        memory_mb = key[2]
        self.popen = subprocess.Popen(
            [*command, "--serve", "--memory-mb", str(memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
        )
        self.pid = self.popen.pid
        self.jobs = 0
        self.idle_since = time.monotonic()
        self._tail = b""
        self._tail_lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[bytes, Future[bytes]] | None] = queue.SimpleQueue()
        # The exit status, once the process has ended and its stderr is read to the end.
        # Marked running: a waiter that is cancelled must not cancel it for everyone else.
        self.exited: Future[int] = Future()
        self.exited.set_running_or_notify_cancel()
        self._drainer = threading.Thread(target=self._drain, name=f"parser-{self.pid}-err")
        self._talker = threading.Thread(target=self._talk, name=f"parser-{self.pid}-io")
        # Daemon threads: they never hold up the interpreter's exit (the process dies with it).
        self._drainer.daemon = self._talker.daemon = True
        self._drainer.start()
        self._talker.start()

    def submit(self, request: ParserInput) -> Future[bytes]:
        """Send one job; the future's result is its answer line, or b"" if the process ended
        first."""
        self.jobs += 1
        with self._tail_lock:
            self._tail = b""  # each job's log gets its own stderr
        answer: Future[bytes] = Future()
        self._requests.put((request.model_dump_json().encode() + b"\n", answer))
        return answer

    def alive(self) -> bool:
        return not self.exited.done() and self.popen.poll() is None

    def kill(self) -> None:
        """End it now (any number of times); its threads then see end-of-file and finish."""
        self.popen.kill()  # a no-op once it has been waited for
        self._requests.put(None)

    def join(self, timeout: float) -> None:
        self._talker.join(timeout)

    @property
    def stderr_tail(self) -> bytes:
        with self._tail_lock:
            return self._tail

    def _drain(self) -> None:
        assert self.popen.stderr is not None
        fd = self.popen.stderr.fileno()
        while block := os.read(fd, 64 * 1024):
            with self._tail_lock:
                self._tail = (self._tail + block)[-STDERR_KEEP:]

    def _talk(self) -> None:
        stdin, stdout = self.popen.stdin, self.popen.stdout
        assert stdin is not None and stdout is not None
        answer: Future[bytes] | None = None
        try:
            while (item := self._requests.get()) is not None:
                request, answer = item
                if not answer.set_running_or_notify_cancel():
                    continue  # its waiter gave up before it was sent, and kills the process
                line = _exchange(stdin, stdout, request)
                answer.set_result(line)
                if not line:
                    break
        except BaseException:
            # A bug here must neither leave the process running unwatched nor its job waiting.
            log.exception("talking to parser process %s failed; killing it", self.pid)
            self.popen.kill()
            if answer is not None and not answer.done():
                answer.set_result(b"")
        finally:
            rc = self.popen.wait()
            self._drainer.join(_JOIN_SECONDS)
            _close_quietly(stdin)
            stdout.close()
            if not self._drainer.is_alive() and self.popen.stderr is not None:
                self.popen.stderr.close()  # (else a grandchild holds it open: left to GC)
            self.exited.set_result(rc)


def _exchange(stdin: IO[bytes], stdout: IO[bytes], request: bytes) -> bytes:
    try:
        stdin.write(request)
        stdin.flush()
        return stdout.readline(ANSWER_LIMIT)
    except BrokenPipeError:
        return b""  # it ended before it read the request: the exit status tells why


def _close_quietly(stream: IO[bytes]) -> None:
    try:
        stream.close()
    except BrokenPipeError:
        # Closing flushes; the process is gone, and so is whatever was left unsent.
        log.debug("parser stdin closed after the process ended")


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


class ParserPool:
    """Warm parser processes, started when needed and reused; see the module's docstring."""

    def __init__(self, max_jobs: int = MAX_JOBS, idle_seconds: float = IDLE_SECONDS) -> None:
        self.max_jobs = max_jobs
        self.idle_seconds = idle_seconds
        self._idle: list[WarmProcess] = []
        self._busy: set[WarmProcess] = set()
        self._lock = threading.Lock()
        # The pending idle check, and the loop it runs on.
        self._reaper: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None

    @property
    def busy(self) -> int:
        return len(self._busy)

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def run(
        self,
        request: ParserInput,
        command: Sequence[str],
        env: Mapping[str, str],
        on_killed: Callable[[int], None],
        *,
        fresh: bool = False,
    ) -> Outcome:
        """Run one job on a warm process (with `fresh`, on a new one). `on_killed(pid)` runs
        when the process was killed (by a signal, a limit, or because the job was cancelled)
        before it could remove its temporary files."""
        proc = self._acquire(command, env, request.memory_mb, fresh=fresh)
        reusable = False
        try:
            outcome = await self._job(proc, request, on_killed)
            reusable = outcome.answer is not None and "ok" in outcome.answer
            return outcome
        finally:
            self._release(proc, reusable)

    async def _job(
        self, proc: WarmProcess, request: ParserInput, on_killed: Callable[[int], None]
    ) -> Outcome:
        answer = proc.submit(request)
        try:
            line = await asyncio.wait_for(asyncio.wrap_future(answer), request.limits.wall_seconds)
        except TimeoutError:
            rc = await _end(proc, on_killed)
            return Outcome(
                proc.pid, returncode=rc, timed_out=True, stderr=proc.stderr_tail, jobs=proc.jobs
            )
        except asyncio.CancelledError:
            # The activity was cancelled or timed out: the parser must not outlive it.
            await _end(proc, on_killed)
            raise
        if not line:
            rc = await asyncio.wrap_future(proc.exited)
            if rc < 0:
                on_killed(proc.pid)
            return Outcome(proc.pid, returncode=rc, stderr=proc.stderr_tail, jobs=proc.jobs)
        return Outcome(
            proc.pid, answer=_decode(line), line=line, stderr=proc.stderr_tail, jobs=proc.jobs
        )

    def _acquire(
        self, command: Sequence[str], env: Mapping[str, str], memory_mb: int, *, fresh: bool
    ) -> WarmProcess:
        key: _Key = (tuple(command), tuple(sorted(env.items())), memory_mb, os.getcwd())
        with self._lock:
            self._close_idle(time.monotonic() - self.idle_seconds)
            while not fresh and (found := [p for p in self._idle if p.key == key]):
                proc = found[-1]  # the most recently used
                self._idle.remove(proc)
                if proc.alive():
                    self._busy.add(proc)
                    return proc
                log.warning(
                    "warm parser process %s ended while idle (exit code %s); starting another",
                    proc.pid,
                    proc.popen.returncode,
                )
                proc.kill()  # lets its threads finish
        proc = WarmProcess(key, command, env)
        with self._lock:
            self._busy.add(proc)
        return proc

    def _release(self, proc: WarmProcess, reusable: bool) -> None:
        with self._lock:
            was_busy = proc in self._busy
            self._busy.discard(proc)
            if was_busy and reusable and proc.jobs < self.max_jobs and proc.alive():
                proc.idle_since = time.monotonic()
                self._idle.append(proc)
                self._schedule_reaping()
                return
        # Idle now (or dead): nothing is in flight, so killing loses nothing.
        proc.kill()

    def _close_idle(self, before: float) -> None:
        for proc in [p for p in self._idle if p.idle_since < before]:
            self._idle.remove(proc)
            proc.kill()

    def _schedule_reaping(self) -> None:
        """One idle check pending at a time, on the running loop (a check left on a loop
        that has closed since never runs, so a new one replaces it)."""
        loop = asyncio.get_running_loop()
        if self._reaper is None or self._reaper[0] is not loop:
            self._reaper = (loop, loop.call_later(self.idle_seconds, self._reap))

    def _reap(self) -> None:
        with self._lock:
            self._reaper = None
            self._close_idle(time.monotonic() - self.idle_seconds)
            if self._idle:  # idle for less time than that: checked again later
                self._schedule_reaping()

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._idle]

    def busy_pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._busy]

    def close(self) -> None:
        """Kill every process (a job still running fails as retryable); the pool can be
        used again afterwards and then starts new ones."""
        with self._lock:
            procs = [*self._idle, *self._busy]
            self._idle.clear()
            self._busy.clear()
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.join(_JOIN_SECONDS)


async def _end(proc: WarmProcess, on_killed: Callable[[int], None]) -> int:
    """Kill a process in the middle of a job; once it is gone, remove what it left."""
    proc.kill()
    rc = await asyncio.wrap_future(proc.exited)
    if rc < 0:
        on_killed(proc.pid)
    return rc


# The worker's pool (parse_runner uses it). The worker closes it when it stops; at exit it is
# closed too, for processes that use the parser without a worker (tests, benchmarks), and
# PR_SET_PDEATHSIG covers a parent that is killed.
POOL = ParserPool()
metrics.watch_parser_pool(lambda: POOL.busy, lambda: POOL.idle)
atexit.register(POOL.close)
