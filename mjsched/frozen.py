"""Frozen dataclasses built on every run's path, with an ``__init__`` that stores in one step.

A frozen dataclass's generated ``__init__`` stores each field through
``object.__setattr__`` (its own ``__setattr__`` refuses): a call per field. For the records
made once or twice per run (a claim, the run's record, its completion) that was most of
their cost: 16 fields of a JobRun took 5.9 µs to store, one ``__dict__.update`` takes 0.7
(timeit, on the machine of bench/RESULTS.md). ``quick_init`` replaces that ``__init__``
with one of the same signature (defaults and default factories included) that fills the
instance's ``__dict__`` at once and then calls ``__post_init__`` if the class has one. The
class stays frozen: assignment after construction still raises.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class _Factory:
    """Stands for "call the field's default factory" in the generated signature."""
    __slots__ = ()


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """Give the frozen dataclass ``cls`` an ``__init__`` that stores its fields in one step."""
    params = dataclasses.fields(cls)   # type: ignore[arg-type]
    if "__slots__" in cls.__dict__ or any(not f.init for f in params) or any(f.kw_only for f in params):
        raise TypeError(f"quick_init: {cls.__name__} has a field quick_init does not handle")
    env: dict[str, Any] = {"_FACTORY": _FACTORY}
    signature, fills = [], []
    for f in params:
        if f.default is not dataclasses.MISSING:
            env[f"_default_{f.name}"] = f.default
            signature.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            signature.append(f"{f.name}=_FACTORY")
            fills.append(f"    if {f.name} is _FACTORY:\n        {f.name} = _factory_{f.name}()\n")
        else:
            signature.append(f.name)
    stores = ", ".join(f"{f.name}={f.name}" for f in params)
    post = "    self.__post_init__()\n" if hasattr(cls, "__post_init__") else ""
    source = (f"def __init__(self, {', '.join(signature)}):\n" + "".join(fills)
              + f"    self.__dict__.update({stores})\n" + post)
    exec(source, env)   # noqa: S102 - the dataclasses module builds its __init__ the same way
    init: Callable[..., None] = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init   # type: ignore[misc]
    return cls
