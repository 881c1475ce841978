"""Drive an awaitable to its end on the calling thread, cancelled when the run's cancel_event is set.

Calling an ``async def`` function only builds a coroutine: a driver that took that object
for the job's result would record a success for work that never ran. This module runs it:
each run gets an event loop of its own on its worker thread (the engine's threads have
none), closed with the run, so no loop and no task outlives it or is shared between runs.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable

# How often the loop looks at the run's cancel_event. A threading.Event cannot call into a
# loop, and a thread per run blocked on it could not be woken when the run ends first.
CANCEL_CHECK_SECONDS = 0.05


class AwaitableCancelled(Exception):
    """The run's cancel_event was set (timeout, shutdown, an operator's cancel): the task was
    cancelled and ended by raising CancelledError."""


def run_awaitable(awaitable: Awaitable[Any], cancel_event: threading.Event) -> Any:
    """The awaitable's value, or what it raises; ``AwaitableCancelled`` when ``cancel_event``
    was set and the task ended cancelled. A RuntimeError when this thread already runs a loop."""
    if _loop_running():
        raise RuntimeError("an awaitable job cannot run on a thread that is already running an event loop")
    loop = asyncio.new_event_loop()
    cancelled = False
    try:
        asyncio.set_event_loop(loop)
        task = loop.create_task(_as_coroutine(awaitable))
        while not task.done():
            loop.run_until_complete(asyncio.wait({task}, timeout=CANCEL_CHECK_SECONDS))
            if not task.done() and cancel_event.is_set() and not cancelled:
                cancelled = True
                task.cancel()
        if task.cancelled():
            if cancelled:
                raise AwaitableCancelled("the run was cancelled (its cancel_event was set: timeout, shutdown or "
                                         "an operator's cancel); its task was cancelled")
        return task.result()   # its value, or what it raised (CancelledError when it cancelled itself)
    finally:
        _close(loop, wait_for_executor=not cancelled)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    """Any awaitable (a coroutine, a Future, an object with ``__await__``) as a coroutine."""
    return await awaitable


def _close(loop: asyncio.AbstractEventLoop, *, wait_for_executor: bool) -> None:
    """What ``asyncio.run`` does at its end: tasks the job left behind are cancelled and
    awaited, async generators closed, the default executor shut down (not waited for after
    a cancel: its threads may be blocked in what the cancel was meant to stop)."""
    try:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        if wait_for_executor:
            loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
