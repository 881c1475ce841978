"""A python job's function given by itself (issue 35 item 4): stored as the path that names it,
or refused, naming the field and what to do, when no path names it again."""
from __future__ import annotations

import functools
from typing import Any, Iterator

import pytest

from mjsched import validation
from mjsched.drivers import callables
from mjsched.drivers.python import resolve_callable
from mjsched.errors import ConfigurationError

HERE = __name__


def work(n: int = 1) -> int:
    return n


async def work_async() -> None:
    return None


def numbers() -> Iterator[int]:
    yield 1


class Report:
    def run(self) -> str:
        return "run"

    @staticmethod
    def static() -> str:
        return "static"

    @classmethod
    def klass(cls) -> str:
        return cls.__name__


def _plain(fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return wrapper


def _wrapped(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return wrapper


@_wrapped
def decorated() -> str:
    return "decorated"


def rebound() -> str:
    return "rebound"


original_rebound = rebound
rebound = _plain(rebound)   # type: ignore[assignment]   # the name now holds another object


def fields(target: Any) -> dict[str, Any]:
    return validation.job_fields({"name": "j", "driver": "python", "cron": "0 3 * * *",
                                  "configuration": {"callable": target, "kwargs": {"n": 2}}}, creating=True)


@pytest.mark.parametrize("target, path", [
    (work, f"{HERE}:work"),
    (work_async, f"{HERE}:work_async"),
    (Report.run, f"{HERE}:Report.run"),          # called on a fresh Report(), as its path says
    (Report.static, f"{HERE}:Report.static"),
    (Report.klass, f"{HERE}:Report.klass"),
    (Report, f"{HERE}:Report"),
    (decorated, f"{HERE}:decorated"),            # functools.wraps: the path names the wrapper
])
def test_a_function_is_stored_as_its_path(target: Any, path: str) -> None:
    conf = fields(target)["configuration"]
    assert conf == {"callable": path, "kwargs": {"n": 2}}
    resolved = resolve_callable(path)
    assert resolved == target or getattr(resolved, "__func__", None) is target   # Report.run: on a new Report()


@pytest.mark.parametrize("target, fragment", [
    (lambda: 1, "a lambda has no importable name"),
    (_plain(work), "is defined inside a function"),
    (Report().run, "bound to an instance"),
    (functools.partial(work, 3), "a partial has no importable name"),
    (original_rebound, "names another object"),
    (numbers, "generator function"),
    (42, "has no importable name"),
])
def test_what_no_path_names_is_refused_naming_the_field(target: Any, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        fields(target)
    assert caught.value.field == "configuration.callable"
    assert fragment in str(caught.value)
    if fragment != "generator function":
        assert "define" in str(caught.value) or "pass" in str(caught.value)   # says what to do


def test_a_closure_is_refused() -> None:
    factor = 3

    def closure() -> int:
        return factor

    with pytest.raises(ConfigurationError, match="closure or nested function") as caught:
        fields(closure)
    assert caught.value.field == "configuration.callable"


def test_a_string_is_left_as_given() -> None:
    assert fields("os:getpid")["configuration"]["callable"] == "os:getpid"


def test_a_builtin_function_is_stored_by_its_module() -> None:
    import os

    path = fields(os.getpid)["configuration"]["callable"]
    assert resolve_callable(path) is os.getpid


def test_main_names_the_running_module_not_a_second_import() -> None:
    """Under pytest ``__main__`` is pytest's entry; a path naming it resolves to that loaded module."""
    import sys

    main = sys.modules["__main__"]
    assert callables.import_module("__main__", "__main__:x", "f") is main
    script = callables.running_script()
    if script.file is not None:
        assert callables.names_script("__main__", script)
    assert not callables.names_script("os", script)


def test_a_main_path_that_names_nothing_says_why() -> None:
    with pytest.raises(ConfigurationError, match="only that script's process can call"):
        resolve_callable("__main__:no_such_function_here")
