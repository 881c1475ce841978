"""``async def`` targets of the python driver, importable by an engine and by an isolated child."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any


async def write_marker(path: str, text: str) -> dict[str, Any]:
    """Its side effect (a file) shows that the body ran; its value, that it was awaited."""
    await asyncio.sleep(0.01)
    Path(path).write_text(text)
    return {"wrote": text, "pid": os.getpid()}


async def fail_async(message: str) -> None:
    await asyncio.sleep(0)
    raise RuntimeError(message)


async def sleep_then_mark(path: str, seconds: float) -> None:
    """Sleeps; its start is marked in ``path`` ("sleeping"), a cancel ("cancelled"), a full sleep ("slept")."""
    Path(path).write_text("sleeping")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        Path(path).write_text("cancelled")
        raise
    Path(path).write_text("slept")
