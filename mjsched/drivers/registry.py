"""Driver registry: ``@register_driver`` plus the ``mjsched.drivers`` entry-point group."""
from __future__ import annotations

import logging
from importlib import metadata
from typing import Any, Callable, TypeVar

from ..errors import ConfigurationError, UnknownDriver
from ..forking import ProcessLock
from .base import BaseScheduledJob

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "mjsched.drivers"
_registry: dict[str, type[BaseScheduledJob]] = {}
_lock = ProcessLock()
_entry_points_loaded = False
_builtin_registered = False

D = TypeVar("D", bound=type[BaseScheduledJob])


def register_driver(name: str) -> Callable[[D], D]:
    """Class decorator: make ``cls`` the driver for jobs whose driver is ``name``."""
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise ConfigurationError("driver", name, "driver name must be a non-empty string of at most 255 characters")

    def decorate(cls: D) -> D:
        if not (isinstance(cls, type) and issubclass(cls, BaseScheduledJob)):
            raise ConfigurationError("driver", cls, "a driver must subclass mjsched.BaseScheduledJob")
        with _lock:
            _registry[name] = cls
        cls.driver_name = name
        return cls

    return decorate


def register_builtin_drivers() -> None:
    """The built-in drivers join the registry (as their import once did): at the first lookup,
    or when an engine starts polling, so that no due instant pays for the import."""
    global _builtin_registered
    if _builtin_registered:
        return
    from .builtin import BUILTIN

    for name, cls in BUILTIN.items():
        register_driver(name)(cls)
    _builtin_registered = True


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _registry:
            continue
        try:
            cls = ep.load()
        except Exception:  # a broken plugin must not break the engine
            log.exception("could not load driver entry point %s", ep.value)
            continue
        register_driver(ep.name)(cls)


def get_driver(name: str) -> type[BaseScheduledJob]:
    """The driver class registered under ``name``; raises ``UnknownDriver``."""
    register_builtin_drivers()

    cls = _registry.get(name)
    if cls is None:
        _load_entry_points()
        cls = _registry.get(name)
    if cls is None:
        raise UnknownDriver(name, list(_registry))
    return cls


def registered_drivers() -> list[str]:
    register_builtin_drivers()

    _load_entry_points()
    return sorted(_registry)


def allowed_driver_names(value: Any, field: str = "allowed_drivers") -> frozenset[str] | None:
    """The drivers an engine may run: None (every registered driver), or a non-empty set of
    registered driver names, given as an iterable or a comma-separated string. A name no
    driver is registered under is a ConfigurationError naming it (register or import the
    driver before building the engine)."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",")]
    else:
        try:
            names = list(value)
        except TypeError:
            raise ConfigurationError(field, value, "must be None or a list of driver names") from None
    if any(not isinstance(n, str) or not n.strip() for n in names):
        bad = next(n for n in names if not isinstance(n, str) or not n.strip())
        raise ConfigurationError(field, bad, "each entry must be a driver name (a non-empty string)")
    names = [n.strip() for n in names]
    if not names:
        raise ConfigurationError(field, value, "must name at least one driver (None allows every driver)")
    known = set(registered_drivers())
    for name in names:
        if name not in known:
            raise ConfigurationError(field, name, f"is not a registered driver (registered: {', '.join(sorted(known))})")
    return frozenset(names)


def refusal(driver: str, allowed: frozenset[str]) -> str:
    """The error_message of a run whose driver this engine may not run."""
    return f"driver {driver!r} is not allowed on this engine (allowed_drivers={','.join(sorted(allowed))})"
