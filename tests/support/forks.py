"""Forking from a test: run a function in a forked child and get its JSON result back."""
from __future__ import annotations

import ctypes
import json
import os
import select
import time
import traceback
from typing import Any, Callable


def _fork_without_hooks() -> int:
    """fork(2) called straight from libc: no os.register_at_fork hook runs in the child
    (PyDLL keeps the GIL across the call, so the child holds it)."""
    return int(ctypes.PyDLL(None).fork())


FORKS = {"os.fork": os.fork, "fork in C, no at-fork hooks": _fork_without_hooks}


def in_child(fork: Callable[[], int], body: Callable[[], dict[str, Any]], timeout: float = 30.0) -> dict[str, Any]:
    """Run ``body`` in a forked child; its result (a JSON dict) comes back through a pipe."""
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:   # the child: never returns into pytest
        os.close(read_end)
        try:
            result = body()
        except BaseException:  # noqa: BLE001 - everything goes back to the parent
            result = {"crashed": traceback.format_exc()}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, 9)
                raise AssertionError(f"the forked child gave no result within {timeout}s")
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks))
    assert "crashed" not in result, result.get("crashed")
    return result
