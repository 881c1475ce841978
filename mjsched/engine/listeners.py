"""What an engine tells its observers, as a typed protocol.

A listener implements any of the hooks of ``EngineListener``; ``add_listener`` refuses
an object with an ``on_*`` method that is no hook (a misspelled hook would otherwise
never be called) or with none of them. Listener errors are logged and never reach the
engine's threads.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from ..errors import ConfigurationError
from ..models import DispatchResult

log = logging.getLogger(__name__)


class EngineListener(Protocol):
    def on_poll(self, result: DispatchResult) -> None: ...

    def on_poll_failed(self) -> None: ...

    def on_run_finished(self, status: str, seconds: float) -> None: ...

    def on_count(self, name: str, n: int) -> None: ...


HOOKS = ("on_poll", "on_poll_failed", "on_run_finished", "on_count")


class Listeners:
    """The engine's listeners, each hook bound once at ``add``."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[tuple[Any, Callable[..., None]]]] = {hook: [] for hook in HOOKS}

    def add(self, listener: EngineListener | Any) -> None:
        unknown = sorted(name for name in dir(listener)
                         if name.startswith("on_") and name not in HOOKS and callable(getattr(listener, name)))
        if unknown:
            raise ConfigurationError("listener", listener, f"has {', '.join(unknown)}, which is no engine event "
                                                           f"(the hooks are {', '.join(HOOKS)})")
        bound = {hook: getattr(listener, hook, None) for hook in HOOKS}
        if not any(callable(handler) for handler in bound.values()):
            raise ConfigurationError("listener", listener, f"implements none of {', '.join(HOOKS)}")
        for hook, handler in bound.items():
            if callable(handler):
                self._hooks[hook].append((listener, handler))

    def observe(self, poll: Callable[[], tuple[DispatchResult, float]]) -> tuple[DispatchResult, float]:
        """Run one poll (the loop's, run_due_jobs's or dispatch_due_jobs's) and tell the
        listeners how it went: ``on_poll`` with its result, or ``on_poll_failed`` as it raises."""
        try:
            result, delay = poll()
        except BaseException:
            self.poll_failed()
            raise
        self.poll(result)
        return result, delay

    def poll(self, result: DispatchResult) -> None:
        self._call("on_poll", result)

    def poll_failed(self) -> None:
        self._call("on_poll_failed")

    def run_finished(self, status: str, seconds: float) -> None:
        self._call("on_run_finished", status, seconds)

    def counted(self, name: str, n: int) -> None:
        """A counter of ``engine.stats`` moved (EngineStats.bump): the same event, heard here."""
        if self._hooks["on_count"]:
            self._call("on_count", name, n)

    def _call(self, hook: str, *args: Any) -> None:
        for listener, handler in self._hooks[hook]:
            try:
                handler(*args)
            except Exception:  # noqa: BLE001 - an observer must never break the engine
                log.exception("engine listener %r failed in %s", listener, hook)
