"""Whether a process the test started is still alive, from /proc."""
from __future__ import annotations


def process_alive(pid: int) -> bool:
    """False when the process is gone or only a zombie waiting to be reaped. A process
    reaped between open() and read() of its stat file makes read() fail with ESRCH
    (ProcessLookupError), not FileNotFoundError: any OSError means it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
