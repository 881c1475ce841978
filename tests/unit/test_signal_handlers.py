"""Every Python signal handler mjsched installs survives a second signal inside itself.

Python runs a handler between two bytecodes of the main thread, and a second signal can run it
again at any line of the first; a handler that holds a lock there waits on itself for ever (an
isolated child hung so, its job never seeing the cancel: mjsched/signal_relay.py). The handlers
are found in the source (every ``signal.signal`` call), so a handler added tomorrow fails here
until it is given a case; each case is re-entered at every line it runs, one run per line.
"""
from __future__ import annotations

import ast
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

import mjsched
from mjsched.cli import entry
from mjsched.signal_relay import SignalRelay

PACKAGE = Path(mjsched.__file__).parent
RETURN_BOUND = 2.0   # seconds a handler run (with its re-entry) may take before it counts as stuck

Handler = Callable[[int, Any], Any]


def installed_handlers() -> set[tuple[str, str]]:
    """(module, handler expression) of every ``signal.signal(sig, handler)`` in the package."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "signal"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "signal"):
                found.add((str(path.relative_to(PACKAGE)), ast.unparse(node.args[1])))
    return found


_relays: list[SignalRelay] = []


@pytest.fixture(autouse=True)
def _end_relays() -> Any:
    yield
    while _relays:
        _relays.pop().restore()   # its pipe closed, its thread ends


HARMLESS = signal.SIGUSR2   # what the relay is installed for here: nothing else in the test process uses it


def _relay_handler() -> tuple[Handler, Callable[[], bool]]:
    delivered = threading.Event()
    relay = SignalRelay(lambda _signum: delivered.set(), name="test-relay").install(HARMLESS)
    _relays.append(relay)
    return relay.handler, lambda: delivered.wait(RETURN_BOUND)


def _raise_interrupt_handler() -> tuple[Handler, Callable[[], bool]]:
    return entry._raise_interrupt, lambda: True    # it raises KeyboardInterrupt: nothing held, nothing to see


# handler expression in the source -> how to make one to re-enter, and what it must have done
CASES: dict[tuple[str, str], Callable[[], tuple[Handler, Callable[[], bool]]] | None] = {
    ("signal_relay.py", "self.handler"): _relay_handler,
    ("cli/entry.py", "_raise_interrupt"): _raise_interrupt_handler,
    # giving a signal back to what it had, or ignoring it, installs no handler of ours
    ("signal_relay.py", "signal.SIG_DFL if handler is None else handler"): None,
    ("cli/entry.py", "previous_term"): None,
    ("isolation.py", "signal.SIG_IGN"): None,
}


def _traced(handler: Handler, signum: int, at_line: Callable[[int], Any]) -> int:
    """Run ``handler`` under a tracer that calls ``at_line(n)`` at its n-th line event (the
    tracer runs untraced, as a nested signal's handler would); answers how many it ran."""
    seen = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal seen
        if event == "line":
            seen += 1
            at_line(seen)
        return tracer

    sys.settrace(tracer)
    try:
        handler(signum, None)
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return seen


def _line_events(handler: Handler, signum: int) -> int:
    return _traced(handler, signum, lambda _n: None)


def returns_when_reentered_at(handler: Handler, signum: int, line: int) -> bool:
    """Run ``handler`` on a thread, calling it again at its ``line``-th line event; whether the
    whole returned (or raised) within RETURN_BOUND."""
    done = threading.Event()

    def reenter(n: int) -> None:
        if n == line:
            handler(signum, None)

    def run() -> None:
        try:
            _traced(handler, signum, reenter)
        finally:
            done.set()

    threading.Thread(target=run, name=f"reentry-{line}", daemon=True).start()
    return done.wait(RETURN_BOUND)


def test_every_handler_in_the_source_has_a_case() -> None:
    found = installed_handlers()
    missing = found - set(CASES)
    assert not missing, (f"signal handlers with no re-entry case: {sorted(missing)}; add them to CASES "
                         "(or hand the signal to a SignalRelay)")
    assert set(CASES) <= found, f"cases for handlers no longer installed: {sorted(set(CASES) - found)}"


@pytest.mark.parametrize("where", [k for k, v in CASES.items() if v is not None], ids="{0[0]}:{0[1]}".format)
def test_a_handler_reentered_at_any_line_returns(where: tuple[str, str]) -> None:
    make = CASES[where]
    assert make is not None
    handler, _ = make()
    lines = _line_events(handler, HARMLESS)
    for line in range(1, lines + 1):
        handler, effect = make()
        assert returns_when_reentered_at(handler, HARMLESS, line), (
            f"{where} did not return when re-entered at its line event {line} of {lines}")
        assert effect(), f"{where} re-entered at line {line}: the signal was not acted on"


def test_the_harness_catches_a_handler_that_takes_a_lock() -> None:
    """The handler the isolated child had (``lambda *_: cancel.set()``): stuck when re-entered
    inside ``Event.set``. The stuck thread is left behind, a daemon blocked on a throwaway lock."""
    probe = threading.Event()
    lines = _line_events(lambda *_: probe.set(), signal.SIGTERM)
    for line in range(1, lines + 1):
        event = threading.Event()
        if not returns_when_reentered_at(lambda *_: event.set(), signal.SIGTERM, line):
            return   # stuck, as it was in the child
    pytest.fail(f"re-entering Event.set() at each of its {lines} lines never got stuck: the harness shows nothing")


def test_a_forked_child_gives_the_signals_back_and_hands_nothing_to_its_parent() -> None:
    """A job's forked worker (multiprocessing's default start on Linux) inherits the handler but
    not the relay thread: its SIGTERM would be written into the parent's pipe and act there."""
    import os

    seen: list[int] = []
    relay = SignalRelay(seen.append, name="test-fork-relay").install(HARMLESS)
    _relays.append(relay)
    pid = os.fork()
    if pid == 0:   # the child: its handler is the default again, so the signal ends it
        try:
            os.kill(os.getpid(), HARMLESS)
        finally:
            os._exit(3)   # reached only if the signal was caught
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == HARMLESS, status
    assert signal.getsignal(HARMLESS) == relay.handler   # the parent keeps its relay
    os.kill(os.getpid(), HARMLESS)
    deadline = threading.Event()
    for _ in range(100):
        if seen:
            break
        deadline.wait(0.02)
    assert seen == [HARMLESS]   # the parent's own signal, once; nothing came from the child


def test_restore_twice_and_install_off_the_main_thread_are_safe() -> None:
    relay = SignalRelay(lambda _signum: None, name="test-restore").install(HARMLESS)
    relay.restore()
    relay.restore()                                   # no second close of a descriptor reused since
    assert signal.getsignal(HARMLESS) == signal.SIG_DFL
    failed: list[BaseException] = []
    thread = threading.Thread(target=lambda: _try_install(failed))
    thread.start()
    thread.join(5)
    assert failed and isinstance(failed[0], ValueError)


def _try_install(failed: list[BaseException]) -> None:
    try:
        SignalRelay(lambda _signum: None, name="test-off-main").install(HARMLESS)
    except BaseException as exc:  # noqa: BLE001 - recorded for the test
        failed.append(exc)
