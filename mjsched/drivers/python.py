"""The ``python`` driver: call a function named in the configuration.

Configuration:

``callable``
    ``"pkg.module:function"`` or ``"pkg.module:Class.method"``. Required. A
    static or class method is called as is; a plain (instance) method is called
    on a fresh ``Class()`` built with no arguments. The function itself may be
    given instead where a job is written: its path is stored (``callables.path_of``;
    lambdas, nested functions and methods bound to an instance are refused). A path
    naming the script the process runs as ``__main__`` resolves to that loaded module,
    never importing the script a second time (``callables.import_module``).
``kwargs``
    ``{name: value}`` passed as keyword arguments. Optional.

The target is called as ``target(**kwargs)``, plus ``context=context`` when it
has a parameter named ``context``. Returning ``None`` is success, a ``dict``
becomes ``details``, a :class:`JobResult` is taken as is, any other value is
success with ``details={"result": value}``; raising is failure with
``error_message="ExceptionType: message"`` and the traceback tail in
``details``.

An ``async def`` target (or one that returns an awaitable) is awaited on an event loop
of the run's own (``awaiting.py``), and what it returns or raises counts as above; the
run's ``cancel_event`` cancels its task. A generator function is refused: calling it
runs nothing, and its generator is no result.
"""
from __future__ import annotations

import inspect
import json
import re
import sys
import traceback
from typing import Any, Callable, Mapping

from ..errors import ConfigurationError
from . import callables
from .awaiting import AwaitableCancelled, run_awaitable
from .base import BaseScheduledJob, ExecutionContext, JobResult
from .base import driver_named

TRACEBACK_TAIL = 2000
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_CALLABLE_RE = re.compile(rf"^{_IDENT}(?:\.{_IDENT})*:{_IDENT}(?:\.{_IDENT})*$")
_FIELD = "configuration.callable"


def check_callable_form(spec: Any) -> None:
    """Raise ``ConfigurationError`` unless ``spec`` looks like ``"pkg.module:attr.path"``; imports nothing."""
    if not isinstance(spec, str):
        raise ConfigurationError(_FIELD, spec, "required: a string 'pkg.module:function'")
    if not _CALLABLE_RE.match(spec):
        raise ConfigurationError(_FIELD, spec, "must look like 'pkg.module:function' or 'pkg.module:Class.method'")


def resolve_callable(spec: Any) -> Callable[..., Any]:
    """Import ``"pkg.module:attr.path"`` and return the callable it names.

    Raises ``ConfigurationError`` on ``configuration.callable`` when the string is
    malformed, does not import, or does not name a callable.
    """
    check_callable_form(spec)
    module_name, _, attr_path = spec.partition(":")
    try:
        target: Any = callables.import_module(module_name, spec, _FIELD)
    except ConfigurationError:
        raise
    except Exception as exc:  # ImportError, or whatever the module raises at import time
        raise ConfigurationError(_FIELD, spec, f"cannot import module {module_name!r} in this process: "
                                 f"{type(exc).__name__}: {exc}; run from the application's directory, add it to "
                                 "PYTHONPATH, or give the CLI --app-dir DIR") from exc
    owner: Any = None
    for name in attr_path.split("."):
        owner = target
        try:
            target = getattr(target, name)
        except AttributeError as exc:
            raise ConfigurationError(_FIELD, spec, f"{type(owner).__name__} {getattr(owner, '__name__', owner)!r} "
                                     f"has no attribute {name!r}{_main_hint(module_name, owner)}") from exc
    if inspect.isclass(owner) and "." in attr_path:
        static = inspect.getattr_static(owner, attr_path.rsplit(".", 1)[1])
        if inspect.isfunction(static):  # an instance method: bind it to a fresh instance
            try:
                target = getattr(owner(), attr_path.rsplit(".", 1)[1])
            except Exception as exc:
                raise ConfigurationError(_FIELD, spec, f"cannot instantiate {owner.__name__}() to call an instance method: {type(exc).__name__}: {exc}") from exc
    if not callable(target):
        raise ConfigurationError(_FIELD, spec, f"names a {type(target).__name__}, which is not callable")
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise ConfigurationError(_FIELD, spec, "names a generator function: calling it runs none of its body; "
                                 "make it a function (or an async def) that returns its result")
    return target


def _main_hint(module_name: str, owner: Any) -> str:
    """Why a '__main__:' path may name nothing here: it names the script that wrote the job."""
    if module_name != callables.MAIN or owner is not sys.modules.get(callables.MAIN):
        return ""
    return ("; a '__main__:' path names a function of the script that stored the job, which only that script's "
            "process can call: give the job an importable path ('module:function'), or run the script from its "
            "directory when storing the function so that its module name is stored")


def _accepts_context(target: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # some builtins have no signature
        return False
    param = parameters.get("context")
    return param is not None and param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


@driver_named("python")
class PythonJob(BaseScheduledJob):
    """Call a Python function; see the module docstring for the configuration."""

    isolation = "thread"
    configuration_keys = frozenset({"callable", "kwargs"})

    def prepare_configuration(self, configuration: Mapping[str, Any], field: str = "configuration") -> Mapping[str, Any]:
        """A function given as ``callable`` becomes its ``"module:qualname"`` path."""
        target = configuration.get("callable")
        if target is None or isinstance(target, str):
            return configuration
        return {**configuration, "callable": callables.path_of(target, f"{field}.callable")}

    def validate_configuration(self, configuration: dict[str, Any]) -> None:
        """The form only: the process that writes a job need not be able to import it."""
        if not isinstance(configuration, dict):
            raise ConfigurationError("configuration", configuration, "must be an object")
        if "callable" not in configuration:
            raise ConfigurationError(_FIELD, None, "required: a string 'pkg.module:function'")
        check_callable_form(configuration["callable"])
        kwargs = configuration.get("kwargs")
        if kwargs is not None and (not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs)):
            raise ConfigurationError("configuration.kwargs", kwargs, "must be an object with string keys")

    def check_can_run(self, configuration: dict[str, Any]) -> None:
        self.resolve(configuration)

    def resolve(self, configuration: dict[str, Any]) -> Callable[..., Any]:
        """The target, imported; ``ConfigurationError`` when it cannot be imported or called as configured."""
        self.validate_configuration(configuration)
        target = resolve_callable(configuration["callable"])
        if "context" in (configuration.get("kwargs") or {}) and _accepts_context(target):
            raise ConfigurationError("configuration.kwargs", configuration["kwargs"],
                                     "'context' is supplied by mjsched; do not pass it")
        return target

    def execute(self, context: ExecutionContext) -> JobResult:
        configuration = context.job.configuration
        try:
            target = self.resolve(configuration)
        except ConfigurationError as exc:
            return JobResult(False, str(exc), None)
        kwargs = dict(configuration.get("kwargs") or {})
        if _accepts_context(target):
            kwargs["context"] = context
        try:
            value = target(**kwargs)
            if inspect.isawaitable(value):   # an async def, or a function returning an awaitable: run it
                value = run_awaitable(value, context.cancel_event)
        except AwaitableCancelled as exc:
            return JobResult(False, str(exc), {"cancelled": True})
        except (Exception, SystemExit) as exc:
            tail = "".join(traceback.format_exception(exc))[-TRACEBACK_TAIL:]
            context.logger.warning("python job %s raised %s: %s", configuration["callable"], type(exc).__name__, exc,
                                   extra={"action": "python_raised"})
            return JobResult(False, f"{type(exc).__name__}: {exc}",
                             {"exception_type": type(exc).__name__, "traceback_tail": tail})
        if inspect.isgenerator(value) or inspect.isasyncgen(value):
            return JobResult(False, f"{configuration['callable']} returned a {type(value).__name__}, which runs "
                             "nothing until iterated; return the result itself", None)
        if value is None:
            return JobResult(True, None, None)
        if isinstance(value, JobResult):
            return value
        if isinstance(value, dict):
            return JobResult(True, None, _json_safe(value))
        return JobResult(True, None, {"result": _json_safe(value)})
