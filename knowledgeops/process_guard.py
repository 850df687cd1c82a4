"""Child processes that must not outlive the worker that started them.

The local embedding model, the parser and the OCR engine run in child processes. When the
worker is killed with SIGKILL (the OOM killer, an operator, a crash test) nothing runs its
cleanup, and such a child would live on as an orphan holding hundreds of MB (seen: the model
process of a killed worker still running ten minutes later). Linux can deliver a signal to a
process when its parent dies; other systems keep the old behaviour.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Call first thing in a child: SIGKILL it when its parent process dies."""
    if sys.platform != "linux":
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
