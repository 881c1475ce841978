"""The per-invocation context every command handler gets: the parsed arguments, the
settings, the database (the embedded PostgreSQL unless a DSN is configured), the engines it
opened (closed at the end), and output that masks secrets. Also what several verb families
share: UsageError, and resolving a JOB argument."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
from typing import Any

from . import config as config_mod
from ..errors import ConfigurationError, JobNotFound, SchedulerError
from ..redaction import redact, redact_text
from .terminal import EXIT_FAILED, GracefulStop, jsonable

log = logging.getLogger(__name__)

EMBEDDED_MOVED_EXIT_BOUND = 20.0   # seconds: `run` exits this soon after its embedded server moved


class UsageError(SchedulerError):
    """Bad command-line usage (exit 2)."""



class Context:
    def __init__(self, args: argparse.Namespace, settings: config_mod.Settings) -> None:
        self.args = args
        self.settings = settings
        self.json = bool(getattr(args, "json", False))
        self.out = sys.stdout
        self.embedded: Any = None
        self._engines: list[Any] = []

    def emit(self, text: str = "") -> None:
        print(redact_text(text), file=self.out, flush=True)

    def emit_json(self, value: Any) -> None:
        print(json.dumps(redact(jsonable(value)), indent=2, default=str), file=self.out, flush=True)

    def dsn(self) -> str:
        if self.settings.dsn:
            return self.settings.dsn
        if self.embedded is None:
            from .embedded import EmbeddedServer

            self.embedded = EmbeddedServer(self.settings["embedded.data_dir"], self.settings["embedded.user"],
                                           announce=lambda m: print(f"mjsched: {m}", file=sys.stderr, flush=True))
        return str(self.embedded.start())

    def watch_embedded(self, stop: "GracefulStop") -> list[str]:
        """For a long-running command on the embedded server: when another process restarted the
        server on another port (the recorded one was taken), stop with a clear error (the list
        gets the message), since this process's connections point at the old port. The stop is
        bounded: the process exits within EMBEDDED_MOVED_EXIT_BOUND seconds whatever the close does."""
        moved: list[str] = []
        if self.embedded is None:
            return moved

        def on_moved(old: int, new: int) -> None:
            moved.append(f"the embedded PostgreSQL moved from 127.0.0.1:{old} to 127.0.0.1:{new} (another mjsched "
                         f"process restarted it while port {old} was taken); this process's connections point at "
                         "the old port: start it again")
            stop.request("the embedded PostgreSQL moved")

            def bound() -> None:
                os.write(2, f"mjsched: error: {moved[0]} (exiting: the stop took too long)\n".encode())
                os._exit(EXIT_FAILED)
            timer = threading.Timer(EMBEDDED_MOVED_EXIT_BOUND, bound)
            timer.daemon = True
            timer.start()
        self.embedded.watch(on_moved)
        return moved

    @property
    def on_embedded(self) -> bool:
        return not self.settings.dsn

    def describe_database(self) -> str:
        if self.on_embedded and self.embedded is not None:
            st = self.embedded.status()
            return f"embedded PostgreSQL {st.get('major') or ''} on 127.0.0.1:{st.get('port')} ({st['data_dir']})"
        return redact_text(self.settings.dsn or "")

    def engine(self, *, long_running: bool = False, install: bool | None = None, **overrides: Any) -> Any:
        """A SchedulingEngine on the configured database (the embedded one by default).

        One-shot commands give up on an unreachable database after a few seconds;
        ``run`` keeps the engine's patient retries. On the embedded database the
        schema is installed on first use (zero setup).
        """
        from ..engine import EngineOptions, SchedulingEngine

        options = self.settings.engine_options()
        tuning = {k: overrides.pop(k) for k in list(overrides) if k in EngineOptions.__dataclass_fields__}
        if tuning:
            options = dataclasses.replace(options, **tuning)
        notifier = overrides.pop("notifier", None) or self.settings.build_notifier()
        if not long_running:
            overrides.update(retry_attempts=2, retry_max_delay=3.0, connect_timeout=5.0)
        engine = SchedulingEngine(self.dsn(), notifier=notifier, options=options, **overrides)
        self._engines.append(engine)
        if install if install is not None else self.on_embedded:
            engine.install()
        return engine

    def close(self) -> None:
        for engine in self._engines:
            try:
                engine.close()
            except Exception as exc:  # noqa: BLE001 - closing must not mask the command's outcome
                log.debug("closing the engine failed: %s", exc)
        self._engines.clear()
        if self.embedded is not None:
            try:
                self.embedded.stop()
            except Exception as exc:  # noqa: BLE001
                print(f"mjsched: warning: could not stop the embedded PostgreSQL: {exc}", file=sys.stderr)


def resolve_job(engine: Any, ref: str) -> Any:
    """A job by id or by name, the library's rule (``engine.get_job``, mjsched/engine/refs.py),
    else, for the command line only, by a unique id prefix (at least 4 characters)."""
    from ..engine.refs import as_job_id

    try:
        return engine.get_job(ref)
    except JobNotFound:
        if len(ref) < 4 or as_job_id(ref) is not None:
            raise
    prefixed = [j for j in engine.list_jobs() if j.id.startswith(ref.lower())]
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        raise ConfigurationError("job", ref, f"id prefix matches {len(prefixed)} jobs; give more characters")
    raise JobNotFound(ref, by="name")
