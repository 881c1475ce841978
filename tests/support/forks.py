"""Forking from a test: run a function in a forked child and get its JSON result back."""
from __future__ import annotations

import faulthandler
import json
import os
import select
import signal
import tempfile
import time
import traceback
from typing import Any, Callable

from mjsched import forking


def fork_unseen() -> int:
    """os.fork with mjsched.forking's at-fork hooks switched off, in parent and child: what a
    fork made in C without Python's hooks (uWSGI's master, unless py-call-osafterfork) leaves
    to the objects' own process-id checks and to the process locks (mjsched/forking.py).
    Python's own hooks (threading's, logging's) and signal_relay's still run.

    Not fork(2) called through ctypes, as before: in a process with threads that is a fork
    CPython itself does not survive. The GIL is a pthread condition variable, and a thread
    waiting for the GIL at the fork leaves a waiter in it that no longer exists in the child,
    whose first release of the GIL then blocks for ever in pthread_cond_signal. (A clean-clone
    CI run had such a child time out; with two busy threads beside the engine it happened in
    most runs here, and gdb showed drop_gil -> __condvar_quiesce_and_switch_g1.)
    os.fork re-makes the GIL in the child before it runs the hooks."""
    names = ("_before_fork", "_after_fork_in_parent", "_after_fork_in_child")
    saved = {name: getattr(forking, name) for name in names}
    for name in names:
        setattr(forking, name, _nothing)
    try:
        return os.fork()
    finally:
        for name, hook in saved.items():
            setattr(forking, name, hook)


def _nothing() -> None:
    pass


FORKS = {"os.fork": os.fork, "a fork mjsched.forking did not see": fork_unseen}


def in_child(fork: Callable[[], int], body: Callable[[], dict[str, Any]], timeout: float = 30.0) -> dict[str, Any]:
    """Run ``body`` in a forked child; its result (a JSON dict) comes back through a pipe.

    A child that gives no result within ``timeout`` fails the test with every thread's
    stack, dumped by faulthandler (from C, without the GIL: it works even if the child's
    interpreter is stuck), then is killed."""
    read_end, write_end = os.pipe()
    stacks = tempfile.TemporaryFile()
    # Registered before the fork, so a child stuck in an at-fork hook can still be asked.
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    pid = -1
    try:
        pid = fork()
    finally:
        if pid != 0:
            faulthandler.unregister(signal.SIGUSR1)
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
                raise AssertionError(f"the forked child gave no result within {timeout}s; its stacks:\n"
                                     + _stacks_of(pid, stacks))
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        stacks.close()
    result = json.loads(b"".join(chunks))
    assert "crashed" not in result, result.get("crashed")
    return result


def _stacks_of(pid: int, stacks: Any, within: float = 3.0) -> str:
    """Ask the child for its stacks (SIGUSR1); read them once the file stops growing (bounded).
    The file's offset is shared with the child, so it is read with pread, never moved."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return "(the child had exited)"
    size, deadline = -1, time.monotonic() + within
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = os.fstat(stacks.fileno()).st_size
        if now and now == size:
            break
        size = now
    text = os.pread(stacks.fileno(), os.fstat(stacks.fileno()).st_size, 0).decode(errors="replace")
    return text or "(none written)"
