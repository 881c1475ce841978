"""A private PostgreSQL cluster a test may restart or break, started as the postgres user.

initdb and pg_ctl refuse to run as root, so as root they run through
``runuser -u postgres``. Data lives under a fresh /tmp directory; the port is
taken from 55432-55499 (the range the chaos tests may use). ``password`` turns
on scram-sha-256 for every role but ``postgres`` (which stays trusted on
127.0.0.1, for set-up), so wrong-password behaviour can be tested.
"""
from __future__ import annotations

import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
import time

import psycopg2

PG_BIN = os.environ.get("MJSCHED_PG_BIN", "/usr/lib/postgresql/15/bin")
PORTS = range(55432, 55500)


def available() -> str | None:
    """None when a private cluster can be started here, else why not."""
    if not os.path.exists(os.path.join(PG_BIN, "initdb")):
        return f"no initdb in {PG_BIN} (set MJSCHED_PG_BIN)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root without runuser"
    return None


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PrivateCluster:
    def __init__(self, *, password_auth: bool = False) -> None:
        self.password_auth = password_auth
        self.base = tempfile.mkdtemp(prefix="mjsched-chaos-pg-", dir="/tmp")
        self.data = os.path.join(self.base, "data")
        self.logfile = os.path.join(self.base, "server.log")
        self.port = 0
        self.restarts: list[tuple[float, float]] = []   # (began, up again), time.time()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        os.chmod(self.base, 0o700)

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)

    def start(self) -> "PrivateCluster":
        self._run(os.path.join(PG_BIN, "initdb"), "-D", self.data, "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8", "--locale", "C")
        hba = ["local all all trust", "host all postgres 127.0.0.1/32 trust"]
        hba.append("host all all 127.0.0.1/32 " + ("scram-sha-256" if self.password_auth else "trust"))
        self._write(os.path.join(self.data, "pg_hba.conf"), "\n".join(hba) + "\n")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as fh:
            fh.write("\nlisten_addresses = '127.0.0.1'\nfsync = off\nsynchronous_commit = off\n"
                     "full_page_writes = off\nmax_connections = 200\nshared_buffers = 32MB\n"
                     f"unix_socket_directories = '{self.base}'\n")
        for _ in range(10):
            port = random.choice([p for p in PORTS if _free(p)] or [0])
            if not port:
                break
            try:
                self._run(os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-l", self.logfile, "-w", "-t", "30",
                          "-o", f"-p {port} -k {self.base}", "start")
            except subprocess.CalledProcessError:
                continue  # someone took the port meanwhile
            self.port = port
            return self
        raise RuntimeError(f"could not start a private PostgreSQL cluster; see {self.logfile}")

    def _write(self, path: str, text: str) -> None:
        with open(path, "w") as fh:
            fh.write(text)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def dsn(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def restart(self, mode: str = "fast") -> float:
        """``pg_ctl restart -m <mode>``; returns the seconds the server was away."""
        began = time.time()
        self._run(os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-l", self.logfile, "-w", "-t", "60",
                  "-m", mode, "-o", f"-p {self.port} -k {self.base}", "restart")
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(self.dsn(), connect_timeout=2).close()
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        up = time.time()
        self.restarts.append((began, up))
        return up - began

    def admin(self, statement: str, database: str = "postgres") -> None:
        conn = psycopg2.connect(self.dsn(database), connect_timeout=5)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    def stop(self) -> None:
        if self.port:
            try:
                self._run(os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-w", "-t", "30", "-m", "immediate",
                          "stop")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.base, ignore_errors=True)
