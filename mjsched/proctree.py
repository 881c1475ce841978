"""A run's processes, found wherever they went and ended together (Linux ``/proc``).

A process belongs to a run when either holds:

- it descends from the run's root process. A root that called :func:`become_subreaper`
  adopts the orphans of its tree (``setsid``, double fork), so they stay descendants while
  it lives;
- it carries the run's mark: the root is started with ``MJSCHED_RUN_MARKS`` naming it
  (:func:`marked_environment`), and every process that inherits its environment keeps it,
  wherever it is reparented, also after the root has exited.

:meth:`RunProcesses.end` sends them all (and the run's process group) ``SIGTERM``, waits
up to a grace period, then stops what is left (``SIGSTOP``: a stopped process cannot fork)
until a round finds no new member, and ``SIGKILL``\\ s them together. A process whose
environment reads empty (one in the middle of an exec shows none for a moment) is scanned
again, a few times, before the run is taken to have none left.

Not found: a process reparented out of the tree that also dropped its environment
(``env -i``, ``sudo``) or overwrote it (``setproctitle``), one a service manager started
(``systemctl start``), another user's; and anything where ``/proc`` is missing (macOS),
where only the process group is signalled. A cgroup per run (``systemd-run --scope``)
contains those.
"""
from __future__ import annotations

import ctypes
import logging
import os
import secrets
import signal
import subprocess
import time
from typing import Callable, Collection, Mapping, NamedTuple

log = logging.getLogger(__name__)

MARKS_VARIABLE = "MJSCHED_RUN_MARKS"
POLL_INTERVAL = 0.05
UNSURE_ROUNDS = 4       # scans more while a process's environment reads empty (mid-exec), at most
KILL_BOUND = 2.0        # seconds the stop-and-kill sweep may take before it gives up on a fork storm
PR_SET_CHILD_SUBREAPER = 36
_PREFIX = MARKS_VARIABLE.encode() + b"="
PF_KTHREAD = 0x00200000  # a kernel thread (stat's flags): it has no environment, and is nobody's run
_HAVE_PROC = os.path.isdir("/proc/self")

Members = dict[int, int]   # pid -> start time in clock ticks (a reused pid has another)


def new_mark() -> str:
    return secrets.token_hex(8)


def marked_environment(env: Mapping[str, str] | None, mark: str) -> dict[str, str]:
    """``env`` (default ``os.environ``) with ``mark`` added to the run marks; a run inside a
    run keeps its outer mark too."""
    result = dict(os.environ if env is None else env)
    prior = result.get(MARKS_VARIABLE)
    result[MARKS_VARIABLE] = f"{prior},{mark}" if prior else mark
    return result


def become_subreaper() -> bool:
    """Make orphans of this process's tree its children instead of init's (Linux >= 3.4)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class RunProcesses:
    """The processes of one run: descendants of ``root`` (while it is still the process that
    was started), members of ``group``, and whatever carries ``mark``. ``exclude`` is never
    signalled (a root ending its own tree)."""

    def __init__(self, root: int | None, mark: str | None, *, group: int | None = None,
                 exclude: Collection[int] = (), since: int | None = None) -> None:
        self.root = root
        self.mark = mark.encode() if mark is not None else None
        self.group = group
        self.exclude = frozenset(exclude)
        self._root_started = _start_time(root) if root is not None else None
        # a marked process was started after the root: older ones need not be read
        self.since = since if since is not None else (self._root_started or 0)
        # Processes of the last scan whose environment read empty: in the middle of an exec
        # the kernel shows none, so a marked one would be missed just then (a double-forked
        # grandchild exec'ing as the run was cancelled outlived it). Scanned again, a few times.
        self.unsure: Members = {}

    def members(self) -> Members:
        """Live (not zombie) members: pid -> start time; the root only when it is marked.
        Sets ``unsure``: the processes whose environment could not be read just then."""
        table = _process_table()
        found: Members = {}
        root = self.root
        if root is not None and root in table and table[root].started == self._root_started:
            children: dict[int, list[int]] = {}
            for pid, entry in table.items():
                children.setdefault(entry.ppid, []).append(pid)
            todo = list(children.get(root, []))
            while todo:
                pid = todo.pop()
                if pid not in found:
                    found[pid] = table[pid].started
                    todo.extend(children.get(pid, []))
        unsure: Members = {}
        for pid, entry in table.items():
            if pid in found or not entry.live:
                continue
            if self.group is not None and entry.pgid == self.group:
                found[pid] = entry.started
            elif self.mark is not None and entry.started >= self.since:
                carries = _carries(pid, self.mark)
                if carries:
                    found[pid] = entry.started
                elif carries is None and not entry.kernel:
                    unsure[pid] = entry.started
        self.unsure = {pid: started for pid, started in unsure.items() if pid not in self.exclude}
        return {pid: started for pid, started in found.items() if pid not in self.exclude and table[pid].live}

    def _settled(self, found: Members, rounds: list[int]) -> bool:
        """Nothing left to end: no member, and no unsure process (after UNSURE_ROUNDS scans
        an empty environment is taken to be one, as ``env -i`` gives)."""
        if self._remaining(found):
            return False
        if self.unsure and rounds[0] < UNSURE_ROUNDS:
            rounds[0] += 1
            return False
        return True

    def signal(self, found: Members, sig: int) -> None:
        if self.group is not None and hasattr(os, "killpg"):
            try:
                os.killpg(self.group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid, started in found.items():
            _signal_pid(pid, started, sig)

    def end(self, grace: float, pause: Callable[[float], object] = time.sleep) -> int:
        """``SIGTERM`` every member, wait until none is left or ``grace`` passes, then
        :meth:`kill`. Returns how many had to be killed. ``pause`` waits a moment (a caller
        may drain pipes meanwhile)."""
        found = self.members()
        self.signal(found, signal.SIGTERM)
        rounds = [0]
        deadline = time.monotonic() + grace
        while not self._settled(found, rounds) and time.monotonic() < deadline:
            pause(POLL_INTERVAL)
            unsure = self.unsure
            found = self.members()
            for pid, started in found.items():   # one that was mid-exec gets the SIGTERM it missed;
                if unsure.get(pid) == started:    # others found late (a trap's cleanup) keep the grace
                    _signal_pid(pid, started, signal.SIGTERM)
        return self.kill(pause) if self._remaining(found) or self.unsure else 0

    def kill(self, pause: Callable[[float], object] = time.sleep) -> int:
        """Stop members until a round finds no new one (a stopped process cannot fork), then
        ``SIGKILL`` them together and wait, bounded, until they are gone. Returns how many."""
        deadline = time.monotonic() + KILL_BOUND
        stopped: Members = {}
        while time.monotonic() < deadline:
            new = {pid: started for pid, started in self.members().items() if pid not in stopped}
            if not new:
                break
            self.signal(new, signal.SIGSTOP)
            stopped.update(new)
        self.signal(stopped, signal.SIGKILL)
        left, rounds = self.members(), [0]
        while not self._settled(left, rounds) and time.monotonic() < deadline:   # SIGKILL cannot be ignored
            self.signal(left, signal.SIGKILL)
            pause(POLL_INTERVAL)
            left = self.members()
        if left:
            log.warning("%d process(es) of a run could not be killed: %s", len(left), sorted(left),
                        extra={"action": "run_processes_left"})
        return len(stopped)


    def _remaining(self, found: Members) -> bool:
        """Members left; without /proc, whether the group still answers."""
        if found or self.group is None or _HAVE_PROC or not hasattr(os, "killpg"):
            return bool(found)
        try:
            os.killpg(self.group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def exited(proc: subprocess.Popen[bytes]) -> bool:
    """Has the child exited? Where possible without reaping it, so that its pid (and its
    process group id) cannot be reused while its tree is still being ended."""
    if not hasattr(os, "waitid"):   # e.g. macOS: reap at once
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def exit_code(proc: subprocess.Popen[bytes]) -> int | None:
    """The child's exit status as ``Popen.returncode`` would give it, without reaping it."""
    if not hasattr(os, "waitid"):
        return proc.poll()
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.returncode
    if info is None:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


class _Entry(NamedTuple):
    ppid: int
    pgid: int
    started: int     # clock ticks after boot
    live: bool       # not a zombie
    kernel: bool     # a kernel thread


def _process_table() -> dict[int, _Entry]:
    """Every process, from /proc."""
    table: dict[int, _Entry] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            table[int(name)] = _Entry(int(fields[1]), int(fields[2]), int(fields[19]), fields[0] not in (b"Z", b"X"),
                                      bool(int(fields[6]) & PF_KTHREAD))
        except (OSError, IndexError, ValueError):
            continue
    return table


def _carries(pid: int, mark: bytes) -> bool | None:
    """Whether the process carries ``mark``; None when its environment and its command line
    both read empty, as in the middle of an exec (``env -i`` leaves a command line)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read()
        if not environ:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return None if not fh.read(1) else False
    except OSError:   # gone, or another user's: not ours to kill either way
        return False
    for entry in environ.split(b"\0"):
        if entry.startswith(_PREFIX):
            return mark in entry[len(_PREFIX):].split(b",")
    return False


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _signal_pid(pid: int, started: int, sig: int) -> None:
    if _start_time(pid) == started:  # still the process we saw, not a reused pid
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
