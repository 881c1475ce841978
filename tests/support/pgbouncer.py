"""A PgBouncer in transaction pooling in front of the tests' PostgreSQL (tests/integration/test_pgbouncer.py).

The Debian package's binary (``apt-get install pgbouncer``; .ci/run installs it), started on
a free port as an unprivileged user (PgBouncer refuses to run as root: ``-u nobody``),
with a configuration of its own; stopped by the caller.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

CANDIDATES = ("pgbouncer", "/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def binary() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name) or (name if os.path.isfile(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """``dsn(database)``: a URL of the same server through the bouncer."""

    def __init__(self, server_dsn: str, pool_mode: str = "transaction") -> None:
        exe = binary()
        assert exe, "no pgbouncer binary"
        server = urlsplit(server_dsn)
        self._server = server
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="mjsched-pgbouncer-"))
        self.home.chmod(0o755)
        user = server.username or "postgres"
        (self.home / "users.txt").write_text(f'"{user}" "{server.password or ""}"\n')
        (self.home / "pgbouncer.ini").write_text(f"""[databases]
* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.home / 'users.txt'}
pool_mode = {pool_mode}
default_pool_size = 40
max_client_conn = 200
""")
        for path in self.home.iterdir():
            path.chmod(0o644)
        self.log = self.home / "pgbouncer.log"
        as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
        self._out = self.log.open("w")
        self.proc = subprocess.Popen([exe, *as_user, str(self.home / "pgbouncer.ini")], stdout=self._out,
                                     stderr=subprocess.STDOUT)
        self._wait_listening(10.0)

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer not listening within {timeout}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def dsn(self, database_dsn: str) -> str:
        """``database_dsn`` (a database on the server) reached through the bouncer."""
        parts = urlsplit(database_dsn)
        auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{self.port}"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)     # immediate shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._out.close()
        shutil.rmtree(self.home, ignore_errors=True)
