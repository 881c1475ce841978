"""Shared terminal helpers of the operator commands: exit codes, tables, instants, ages and
durations as text, JSON conversion, and the graceful stop (first signal drains, second exits).
``commands`` and ``demo`` both use them; neither imports the other for them."""
from __future__ import annotations

import dataclasses
import enum
import logging
import os
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..signal_relay import SignalRelay

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
UTC = timezone.utc


# -- output helpers ---------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    return value


def ts(value: datetime | None) -> str:
    if value is not None and not isinstance(value, datetime):   # an Undecodable (mjsched/decoding.py)
        return str(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def clip(text: Any, width: int = 60) -> str:
    out = "-" if text is None or text == "" else " ".join(str(text).split())
    return out if len(out) <= width else out[: width - 3] + "..."


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)



class GracefulStop:
    """SIGINT/SIGTERM: the first sets an event (drain, then exit); the second exits at once, code 1.

    Both are acted on by a relay thread fed by ``signal.set_wakeup_fd`` (mjsched/signal_relay.py):
    the C-level handler writes the signal number to a pipe the moment it arrives, so the exit
    does not wait for the main thread (which may be in a database call or joining the drain),
    and no lock is taken inside a signal handler (a second signal inside the first handler's
    ``Event.set`` would wait on itself). Once a first signal came, the handlers stay installed
    until the process ends: a second signal during the close (or the embedded server's stop)
    still exits with 1, never with death by the default handler (143).
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.forced = threading.Event()
        self.signal_name = "?"
        self._seen = 0
        self._seen_lock = threading.Lock()
        self._relay: SignalRelay | None = None

    def request(self, reason: str) -> None:
        """A stop that is no signal (the embedded server moved): it counts as the first signal."""
        self._count(reason)

    def _count(self, reason: str, signum: int | None = None) -> None:
        with self._seen_lock:
            self._seen += 1
            second = self._seen >= 2
        if second and signum is not None:
            self.force_exit(signum)
        if not self.event.is_set():
            self.signal_name = reason
            self.event.set()

    def _on_signal(self, signum: int) -> None:
        """On the relay thread, never in a signal handler."""
        self._count(signal.Signals(signum).name, signum)

    def force_exit(self, signum: int) -> None:
        """The second signal: say so and end the process now (running jobs keep their leases)."""
        self.forced.set()
        name = signal.Signals(signum).name
        message = (f"mjsched: second signal ({name}): exiting now with code 1; running jobs keep their leases "
                   "until expiry\n")
        try:
            os.write(2, message.encode())
        except OSError:
            pass
        os._exit(EXIT_FAILED)

    def installed(self) -> Any:
        stop = self

        class _Installed:
            def __enter__(self) -> GracefulStop:
                stop._relay = SignalRelay(stop._on_signal, name="mjsched-signals", wakeup=True)
                stop._relay.install(signal.SIGINT, signal.SIGTERM)
                return stop

            def __exit__(self, *exc: Any) -> None:
                if stop.event.is_set():
                    return      # stopping: a second signal must still exit at once until the very end
                if stop._relay is not None:
                    stop._relay.restore()
                    stop._relay = None
        return _Installed()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.event.is_set():
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                return False
            self.event.wait(left)
        return True


def drain(engine: Any, budget: float, stop: GracefulStop) -> int:
    """stop_polling(wait=True, max_wait=budget) on a helper thread; a second signal exits at once
    (GracefulStop.force_exit)."""
    done = threading.Event()
    failure: list[BaseException] = []

    def work() -> None:
        try:
            engine.stop_polling(wait=True, max_wait=budget)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)
        finally:
            done.set()
    threading.Thread(target=work, name="mjsched-drain", daemon=True).start()
    while not done.wait(0.2):
        if stop.forced.is_set():
            log.warning("second signal: exiting without waiting; running jobs keep their leases until expiry",
                        extra={"action": "cli_forced_exit"})
            return EXIT_FAILED
    if failure:
        raise failure[0]
    return EXIT_OK
