"""Which sockets a process holds (from /proc): how the fork tests tell a parent's session from a
child's, and the chaos tests one engine's backends from another's."""
from __future__ import annotations

import os
from urllib.parse import urlsplit


def database_sockets(pid: int, dsn: str) -> set[int]:
    """Inodes of the TCP sockets process ``pid`` holds that are connected to PostgreSQL's port."""
    port = urlsplit(dsn).port or 5432
    remote = f":{port:04X}"
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[2].endswith(remote):
                    inodes.add(int(fields[9]))
    return socket_inodes(pid) & inodes


def socket_inodes(pid: int) -> set[int]:
    """Inodes of every socket process ``pid`` holds (its /proc fd links); none once it is gone."""
    held: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return held
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(int(target[8:-1]))
    return held
