"""Functions named by path (``"module:qualname"``), and the script running as ``__main__``.

A python job stores its function as a path, and resolving the path imports the module.
When that module is the script the process runs (``python app.py`` with ``"app:ping"``),
importing it would run the script's top level a second time, inside the job: a second
engine, a second Flask app. So a path naming the running script, by its module name or as
``"__main__"``, resolves to the ``__main__`` module already loaded.

A process-isolated run resolves its function in a new interpreter (mjsched/isolation.py),
where the engine's script is not loaded: importing it there runs its top level, so the
child refuses such a path (``enter_isolated_child`` tells it which script that is).

A function object given where a path is taken (``configuration={"callable": ping}``) is
stored as its path, after checking that the path names that same object again.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import keyword
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import ConfigurationError

MAIN = "__main__"


@dataclass(frozen=True)
class Script:
    """What names a process's ``__main__``: its file (real path) and, under ``python -m``, its module name."""

    file: str | None
    spec_name: str | None


_parent_script: Script | None = None     # set in a process-isolated child: the engine's script
_real_paths: dict[str, str] = {}


def running_script() -> Script:
    """The script this process runs as ``__main__`` (``file`` None for ``python -c`` or a REPL)."""
    main = sys.modules.get(MAIN)
    spec = getattr(main, "__spec__", None)
    file = getattr(main, "__file__", None)
    return Script(file=_real(file) if isinstance(file, str) else None,
                  spec_name=getattr(spec, "name", None))


def enter_isolated_child(parent: Script) -> None:
    """Called by the isolated child: ``parent`` is the engine's script, which must not be imported here."""
    global _parent_script
    _parent_script = parent


def _real(path: str) -> str:
    found = _real_paths.get(path)
    if found is None:
        found = _real_paths[path] = os.path.realpath(path)
    return found


def _origin(module_name: str) -> str | None:
    """The file ``import module_name`` would load, found without running any of its code
    (nor its packages' ``__init__``); None when it is not found on the path."""
    parts = module_name.split(".")
    search: Any = None   # None: sys.path
    origin: str | None = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            search, origin = getattr(loaded, "__path__", None), getattr(loaded, "__file__", None)
        else:
            spec = importlib.machinery.PathFinder.find_spec(name, search)
            if spec is None:
                return None
            search, origin = spec.submodule_search_locations, spec.origin
        if i < len(parts) - 1 and search is None:
            return None   # not a package: it has no submodules
    return origin if isinstance(origin, str) else None


def names_script(module_name: str, script: Script) -> bool:
    """Whether importing ``module_name`` would load ``script`` (``"__main__"`` always names it)."""
    if module_name == MAIN:
        return True
    if script.spec_name is not None and module_name == script.spec_name:
        return True
    if script.file is None:
        return False
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return isinstance(file, str) and _real(file) == script.file
    origin = _origin(module_name)
    return origin is not None and _real(origin) == script.file


def import_module(module_name: str, spec: str, field: str) -> ModuleType:
    """The module a path's ``module_name`` names: the running ``__main__`` when it names the
    running script (never imported a second time), else ``importlib.import_module``."""
    if _parent_script is not None:
        if names_script(module_name, _parent_script):
            where = os.path.basename(_parent_script.file) if _parent_script.file else "the engine's __main__"
            raise ConfigurationError(field, spec, f"names a function of {where}, the script the engine runs as "
                                     "__main__; a process-isolated run calls it in a new interpreter, which would "
                                     "import that script and run its top level again (a second engine): move the "
                                     "function into a module the script imports (e.g. jobs.py, 'jobs:name'), or run "
                                     "the job in thread isolation (isolation='thread')")
    elif names_script(module_name, running_script()):
        return sys.modules[MAIN]
    return importlib.import_module(module_name)


def main_path_name() -> str:
    """The module name other processes import the running script by (``python -m pkg.mod``:
    "pkg.mod"; ``python app.py`` run from its directory: "app"), else "__main__"."""
    script = running_script()
    if script.spec_name and script.spec_name.rpartition(".")[2] != MAIN:
        return script.spec_name
    if script.file is not None and script.spec_name is None:
        stem = os.path.splitext(os.path.basename(script.file))[0]
        if stem.isidentifier() and not keyword.iskeyword(stem) and names_script(stem, script):
            return stem
    return MAIN


def _refuse(field: str, value: Any, why: str) -> ConfigurationError:
    return ConfigurationError(field, value, f"{why}; pass a function defined with def at the top level of a module "
                              "(or its path 'module:function'), with its arguments in kwargs")


def path_of(value: Any, field: str) -> str:
    """The ``"module:qualname"`` that names the function ``value``, checked to name it again;
    ConfigurationError naming ``field`` for what no path can name."""
    if inspect.ismethod(value) and not inspect.isclass(value.__self__):
        raise ConfigurationError(field, value, "is a method bound to an instance, which a stored path cannot "
                                 "name ('module:Class.method' calls the method on a fresh Class()); pass "
                                 "Class.method, or a module-level function that finds the instance it needs")
    function = value.__func__ if inspect.ismethod(value) else value
    module_name = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not callable(value) or not isinstance(module_name, str) or not isinstance(qualname, str):
        raise _refuse(field, value, f"a {type(value).__name__} has no importable name")
    if qualname.rpartition(".")[2] == "<lambda>":
        raise _refuse(field, value, "a lambda has no importable name")
    if "<locals>" in qualname:
        raise _refuse(field, value, f"{qualname} is defined inside a function (a closure or nested function), "
                      "which no later run can import")
    if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
        raise ConfigurationError(field, value, "is a generator function: calling it runs none of its body; make it "
                                 "a function (or an async def) that returns its result")
    if module_name == MAIN:
        module_name = main_path_name()
    path = f"{module_name}:{qualname}"
    found = _lookup(module_name, qualname)
    if found is not value and not (inspect.ismethod(value) and found == value):   # a classmethod: a new binding
        raise _refuse(field, value, f"{path!r} names another object (its name was rebound, or it was wrapped "
                      "without functools.wraps)")
    return path


def _lookup(module_name: str, qualname: str) -> Any:
    """What the path names in this process, as the driver resolves it (no instance built); None
    when it names nothing (or a module not imported: a function's module always is)."""
    script = running_script()
    module = sys.modules.get(MAIN) if names_script(module_name, script) else sys.modules.get(module_name)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return target
