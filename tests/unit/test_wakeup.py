"""The engine's wiring without the facade (issue 38): the wake-up flag is made before the
poller and the parts that wake it, and no part is handed the facade."""
from __future__ import annotations

import dataclasses
import threading
import typing

from mjsched.engine.control import EngineControl
from mjsched.engine.manual import ManualRuns
from mjsched.engine.parts import EngineParts
from mjsched.engine.poller import Poller
from mjsched.engine.wakeup import Wakeup
from mjsched.engine.wiring import LateCall


def test_a_wake_before_the_poller_exists_is_kept_for_its_loop() -> None:
    wakeup = Wakeup()
    wakeup()                                   # a part wakes it (a slot freed) before the poller is built
    polls = threading.Semaphore(0)
    poller = Poller(lambda: (polls.release(), 30.0)[1], min_interval=0.0, max_interval=60.0, wakeup=wakeup)
    assert poller.wakeup is wakeup and wakeup.pending
    poller.start()
    try:
        assert polls.acquire(timeout=5.0)
        assert not wakeup.pending, "the first poll saw what the early wake announced"
        wakeup()                               # the part's wake reaches the running loop
        assert polls.acquire(timeout=5.0), "the wake through the shared Wakeup did not end the 30 s sleep"
    finally:
        poller.stop(timeout=5.0)
    assert not poller.alive


def test_an_instrumented_wake_sees_the_parts_wakes() -> None:
    """The parts are handed the Wakeup, not its bound method: wrapping ``wake`` sees their calls."""
    wakeup = Wakeup()
    seen: list[str] = []
    original = wakeup.wake
    wakeup.wake = lambda: (seen.append("wake"), original())[1]   # type: ignore[method-assign]
    wakeup()
    assert seen == ["wake"] and wakeup.pending


def test_a_late_call_does_nothing_until_bound_then_calls_its_target() -> None:
    calls: list[int] = []
    late = LateCall()
    late()
    late.bind(lambda: calls.append(1))
    late()
    assert calls == [1]


def test_the_start_stop_steps_and_manual_runs_take_the_parts_not_the_facade() -> None:
    for cls in (EngineControl, ManualRuns):
        assert typing.get_type_hints(cls.__init__)["parts"] is EngineParts, cls.__name__
    assert dataclasses.fields(EngineParts) and EngineParts.__dataclass_params__.frozen   # type: ignore[attr-defined]
    hints = typing.get_type_hints(EngineParts)
    untyped = [name for name, hint in hints.items() if hint is typing.Any]
    assert not untyped, f"parts typed Any: {untyped}"

