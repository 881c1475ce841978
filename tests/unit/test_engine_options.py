"""The cap ``max_concurrent_jobs`` (and every tuning argument) on every path into the engine:
a bad value is refused naming the field and the value, never accepted and ignored (pure; no
database is reached: each error comes before the backend is opened)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import pytest

import mjsched
from mjsched.cli.config import load
from mjsched.engine.options import EngineOptions

NOWHERE = "postgresql://mjsched@127.0.0.1:1/never_reached"


def _cli_file(tmp_path: Path) -> Any:
    (tmp_path / "mjsched.toml").write_text("[scheduled_jobs]\nmax_concurrent_jobs = 0\n")
    return load({}, env={}, cwd=tmp_path)


PATHS: dict[str, Callable[[Path], Any]] = {
    "EngineOptions": lambda _: EngineOptions(max_concurrent_jobs=0),
    "dataclasses.replace": lambda _: dataclasses.replace(EngineOptions(), max_concurrent_jobs=0),
    "SchedulingEngine": lambda _: mjsched.SchedulingEngine(NOWHERE, max_concurrent_jobs=0),
    "SchedulingEngine positional": lambda _: mjsched.SchedulingEngine(NOWHERE, 0),
    "SchedulingEngine beside options": lambda _: mjsched.SchedulingEngine(NOWHERE, max_concurrent_jobs=0,
                                                                          options=EngineOptions()),
    "CLI flag": lambda tmp: load({"max_concurrent_jobs": (0, "--max-concurrent-jobs")}, env={}, cwd=tmp),
    "CLI environment": lambda tmp: load({}, env={"MJSCHED_MAX_CONCURRENT_JOBS": "0"}, cwd=tmp),
    "CLI file": _cli_file,
}


@pytest.mark.parametrize("path", PATHS)
def test_a_cap_of_zero_is_refused_on_every_path(path: str, tmp_path: Path) -> None:
    with pytest.raises(mjsched.ConfigurationError) as info:
        PATHS[path](tmp_path)
    assert "max_concurrent_jobs" in info.value.field.lower().replace("-", "_")
    assert info.value.value in (0, "0")
    assert "0" in str(info.value)


@pytest.mark.parametrize("name, value", [("lease_timeout", 30.0), ("max_poll_interval", 1.0),
                                         ("max_concurrent_jobs", 2), ("cancel_grace", 0.0)])
def test_a_tuning_argument_beside_options_is_refused_not_ignored(name: str, value: Any) -> None:
    with pytest.raises(mjsched.ConfigurationError) as info:
        mjsched.SchedulingEngine(NOWHERE, options=EngineOptions(), **{name: value})
    assert info.value.field == name and info.value.value == value
    assert "options" in info.value.reason


def test_the_constructor_defaults_are_the_options_defaults() -> None:
    """What the facade compares against to tell a given argument from a default one."""
    import inspect

    signature = inspect.signature(mjsched.SchedulingEngine.__init__).parameters
    for field in dataclasses.fields(EngineOptions):
        if field.name in signature:
            assert signature[field.name].default == field.default, field.name
