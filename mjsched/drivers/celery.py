"""The ``celery`` driver: hand a run to Celery workers (optional extra ``mjsched[celery]``).

mjsched decides each tick exactly once across its engines; this driver turns that tick
into one Celery task message whose id is derived from the run, so that a message sent
again for the same run carries the same id (and a worker-side guard,
:mod:`mjsched.contrib.celery`, can drop it). Celery is imported only when a job of
this driver is validated or run.

Configuration:

``app``
    ``"pkg.module:app"`` (a Celery app the engine's host can import; its broker,
    result backend and serializer are used) or a broker URL (``redis://...``,
    ``amqp://...``). Required.
``backend``
    Result backend URL, only with a broker URL (an app names its own).
``task``
    The task name as the workers register it. Required.
``args`` / ``kwargs``
    A JSON list / object passed to the task. Default ``[]`` / ``{}``.
``queue``, ``routing_key``, ``priority``
    Routing options passed to ``send_task`` (priority 0..255). Optional.
``mode``
    ``"wait"`` (default): the run holds its slot while the task runs and mirrors its
    outcome (SUCCESS: Completed, FAILURE: Failed with the remote exception, REVOKED:
    Failed). Needs a result backend. Cancellation (max_runtime, shutdown) revokes the
    task with ``terminate=True``. ``"send"``: Completed once the broker accepted the
    message.
``send_timeout``
    Seconds the broker may take to accept the message before the run fails
    (default 10).
``unregistered_check``
    Seconds a ``wait`` task may stay unfinished before the workers consuming its queue
    are asked, every few seconds from then on, where it is (default 5; 0 turns the
    check off): see :mod:`mjsched.drivers.celery_probe`. When those workers answer and
    none registers the task name, the run fails (and the message is revoked: they are
    the ones that would take it). Workers of other queues are never asked.
Every message carries the task headers ``mjsched_job_id``, ``mjsched_run_id`` and
``mjsched_fencing_token`` (the run's fencing token, an integer that grows with every
start of the job; docs/guide/reliability.md, "Fencing tokens"): a worker reads it with
:func:`mjsched.contrib.celery.fencing_token` and writes with a compare-and-set on it.
``lost_after``
    Seconds of consecutive answers that no consumer holds the task (at least three
    answers, while one of them has a free slot) after which a ``wait`` run fails as
    lost, without revoking anything (default 10; 0: wait until max_runtime). On Redis
    with ``acks_late`` and no duplicate guard, set it above the visibility timeout.

The task id is ``uuid5(namespace, "<job id>|<tick or manual run id>|<attempt>")``: a
retry (the job's retry policy) is a new attempt, hence a new task and a new message.
"""
from __future__ import annotations

import math
import threading
import time
import uuid
from datetime import timezone
from typing import Any, Callable

from .. import tracing
from ..errors import ConfigurationError
from ..extras import install_command
from ..forking import ProcessLock
from ..models import JobRun
from .base import BaseScheduledJob, ExecutionContext, JobResult
from .base import driver_named
from .celery_probe import UNREGISTERED, LostWatch, ask, task_queue
from .celery_trust import APP_PATH_RE

TASK_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "celery.mjsched")   # fixed: ids stay stable across releases
MODES = ("wait", "send")
KNOWN_KEYS = {"app", "backend", "task", "args", "kwargs", "queue", "routing_key", "priority", "mode",
              "send_timeout", "unregistered_check", "lost_after"}
BROKER_SCHEMES = {"redis", "rediss", "amqp", "amqps", "pyamqp", "librabbitmq", "memory", "sqs", "sentinel",
                  "filesystem", "qpid", "zookeeper", "mongodb", "sqla", "sqlalchemy", "confluentkafka", "gcpubsub",
                  "azurestoragequeues", "azureservicebus"}
RESULT_SUMMARY_CHARS = 500
POLL_INTERVALS = (0.05, 0.1, 0.2, 0.3, 0.5)       # then 1 s between polls
BACKEND_FAILURE_BUDGET = 30.0                      # seconds of failing polls before the run fails
BACKEND_CALL_TIMEOUT = 10.0                        # one result-backend read or control call, at most
DEFAULT_SEND_TIMEOUT = 10.0
DEFAULT_UNREGISTERED_CHECK = 5.0
DEFAULT_LOST_AFTER = 10.0
PROBE_INTERVAL = 2.0                               # seconds between two questions to the workers
UNFINISHED = ("PENDING", "RECEIVED", "STARTED", "RETRY")

_apps: dict[tuple[str, str | None], Any] = {}
_apps_lock = ProcessLock()


def task_id_for(job_id: str, run: JobRun, attempt: int = 1) -> str:
    """The Celery task id of ``run``: the same run (tick) always gets the same id."""
    if run.scheduled_for is not None:
        tick = run.scheduled_for.astimezone(timezone.utc).isoformat()
    else:
        tick = f"manual:{run.id}"
    return str(uuid.uuid5(TASK_ID_NAMESPACE, f"{job_id}|{tick}|{attempt}"))


def _is_broker_url(app: str) -> bool:
    return "://" in app


def _require_celery() -> Any:
    try:
        import celery
    except ImportError as exc:
        raise ConfigurationError("driver", "celery",
                                 f"the celery driver needs Celery: {install_command('celery')}") from exc
    return celery


def load_app(configuration: dict[str, Any]) -> Any:
    """The Celery app a configuration names (imported, or built once per broker/backend pair)."""
    _require_celery()
    spec = configuration["app"]
    backend = configuration.get("backend")
    key = (spec, backend)
    with _apps_lock:
        if key in _apps:
            return _apps[key]
    if _is_broker_url(spec):
        from celery import Celery

        app = Celery("mjsched-celery-driver", broker=spec, backend=backend, set_as_current=False)
        app.conf.broker_connection_retry_on_startup = False
        app.conf.broker_connection_timeout = 5.0
        app.conf.redis_socket_connect_timeout = 5.0
        app.conf.redis_socket_timeout = 10.0
    else:
        import importlib

        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - a module may raise anything at import
            raise ConfigurationError("configuration.app", spec,
                                     f"cannot import module {module_name!r}: {type(exc).__name__}: {exc} "
                                     "(run the command from the project's folder, or give the CLI --app-dir DIR, or "
                                     "add the folder to PYTHONPATH)") from exc
        app = module
        for part in attr.split("."):
            if not hasattr(app, part):
                raise ConfigurationError("configuration.app", spec, f"module {module_name!r} has no attribute {attr!r}")
            app = getattr(app, part)
        from celery import Celery

        if not isinstance(app, Celery):
            raise ConfigurationError("configuration.app", spec, f"is a {type(app).__name__}, not a Celery app")
    with _apps_lock:
        return _apps.setdefault(key, app)


def has_result_backend(app: Any) -> bool:
    backend = app.conf.result_backend
    if not backend:
        return False
    return "DisabledBackend" not in type(app.backend).__name__


def validate_form(configuration: Any) -> None:
    """Check the configuration's form (no import, no network)."""
    if not isinstance(configuration, dict):
        raise ConfigurationError("configuration", configuration, "must be an object")
    for key in configuration:
        if key not in KNOWN_KEYS:
            raise ConfigurationError(f"configuration.{key}", configuration[key],
                                     f"unknown key; known: {', '.join(sorted(KNOWN_KEYS))}")
    app = configuration.get("app")
    _check_app(app)
    backend = configuration.get("backend")
    if backend is not None:
        if not _is_broker_url(app):
            raise ConfigurationError("configuration.backend", backend,
                                     "only with a broker URL in 'app'; an app names its own result backend")
        if not isinstance(backend, str) or "://" not in backend:
            raise ConfigurationError("configuration.backend", backend, "must be a result backend URL")
    _check_message(configuration)
    mode = configuration.get("mode", "wait")
    if mode not in MODES:
        raise ConfigurationError("configuration.mode", mode, "must be 'wait' or 'send'")
    for key in ("send_timeout", "unregistered_check", "lost_after"):
        value = configuration.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                  or value > 3600 or (key == "send_timeout" and value == 0)):
            raise ConfigurationError(f"configuration.{key}", value, "must be a number of seconds (0..3600)")
    if mode == "wait" and _is_broker_url(app) and not backend:
        raise ConfigurationError("configuration.mode", mode,
                                 "'wait' needs a result backend: set configuration.backend, or use mode 'send'")


def _check_app(app: Any) -> None:
    """An app path ('pkg.module:app') or a broker URL of a known scheme."""
    if not isinstance(app, str) or not app.strip():
        raise ConfigurationError("configuration.app", app, "required: 'pkg.module:app' or a broker URL")
    if _is_broker_url(app):
        scheme = app.split("://", 1)[0].split("+")[-1].lower()
        if scheme not in BROKER_SCHEMES:
            raise ConfigurationError("configuration.app", app,
                                     f"unknown broker scheme {scheme!r} (e.g. redis://, amqp://)")
    elif not APP_PATH_RE.match(app):
        raise ConfigurationError("configuration.app", app, "must be 'pkg.module:app' or a broker URL such as "
                                                           "redis://127.0.0.1:6379/0")


def _check_message(configuration: dict[str, Any]) -> None:
    """The task message: its name, arguments and routing."""
    task = configuration.get("task")
    if not isinstance(task, str) or not task.strip() or len(task) > 255:
        raise ConfigurationError("configuration.task", task, "required: the task name the workers register")
    args = configuration.get("args", [])
    if not isinstance(args, list):
        raise ConfigurationError("configuration.args", args, "must be a list")
    kwargs = configuration.get("kwargs", {})
    if not isinstance(kwargs, dict) or any(not isinstance(k, str) for k in kwargs):
        raise ConfigurationError("configuration.kwargs", kwargs, "must be an object with string keys")
    for key in ("queue", "routing_key"):
        value = configuration.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigurationError(f"configuration.{key}", value, "must be a non-empty string or null")
    priority = configuration.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                 or not 0 <= priority <= 255):
        raise ConfigurationError("configuration.priority", priority, "must be an integer 0..255 or null")


def _summary(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = object.__repr__(value)
    return text if len(text) <= RESULT_SUMMARY_CHARS else text[:RESULT_SUMMARY_CHARS] + "..."


def _finished(state: str | None, meta: Any, task_name: str, task_id: str,
              details: dict[str, Any]) -> JobResult | None:
    """The run's result once the task reached a final state (SUCCESS, FAILURE, REVOKED); else None."""
    if state == "SUCCESS":
        details.update(state=state, result=_summary(meta.get("result")), worker=_worker(meta))
        return JobResult(True, None, details)
    if state == "FAILURE":
        remote = meta.get("result")
        text = f"{type(remote).__name__}: {remote}" if isinstance(remote, BaseException) else _summary(remote)
        details.update(state=state, exception=text, worker=_worker(meta),
                       traceback_tail=str(meta.get("traceback") or "")[-2000:])
        return JobResult(False, f"task {task_name} [{task_id}] failed on the worker: {text}", details)
    if state == "REVOKED":
        details.update(state=state)
        return JobResult(False, f"task {task_name} [{task_id}] was revoked before it finished "
                                "(by an operator, or a worker's time limit)", details)
    return None


@driver_named("celery")
class CeleryJob(BaseScheduledJob):
    """Send one Celery task per run; see the module docstring."""

    isolation = "thread"
    high_frequency_by_design = True     # a per-second hand-off to workers is what it is for
    configuration_keys = frozenset(KNOWN_KEYS)
    default_max_runtime = 3600.0        # a 'wait' never holds a slot forever, even if a task is lost

    def validate_configuration(self, configuration: dict[str, Any]) -> None:
        validate_form(configuration)
        # 'wait' without a result backend: told at create_job when this process can see the app.
        if configuration.get("mode", "wait") == "wait" and not _is_broker_url(configuration["app"]):
            try:
                app = load_app(configuration)
            except ConfigurationError:
                return   # not importable here (the CLI on another host): checked when it runs
            if not has_result_backend(app):
                raise ConfigurationError("configuration.mode", "wait",
                                         f"app {configuration['app']!r} has no result backend "
                                         "(result_backend is not set); set one or use mode 'send'")

    def check_can_run(self, configuration: dict[str, Any]) -> None:
        validate_form(configuration)
        app = load_app(configuration)
        if configuration.get("mode", "wait") == "wait" and not has_result_backend(app):
            raise ConfigurationError("configuration.mode", "wait",
                                     f"app {configuration['app']!r} has no result backend; set one or use mode 'send'")

    def execute(self, context: ExecutionContext) -> JobResult:
        configuration = context.job.configuration
        validate_form(configuration)
        try:
            app = load_app(configuration)
        except ConfigurationError as exc:
            return JobResult(False, str(exc), {"app": configuration.get("app")})
        mode = configuration.get("mode", "wait")
        task_name = configuration["task"]
        attempt = int(context.run.attempt or 1)
        task_id = task_id_for(context.job.id, context.run, attempt)
        details: dict[str, Any] = {"task_id": task_id, "task": task_name, "mode": mode, "attempt": attempt}
        if mode == "wait" and not has_result_backend(app):
            return JobResult(False, f"task {task_name} not sent: mode 'wait' needs a result backend and app "
                                    f"{configuration['app']!r} has none; set result_backend or use mode 'send'",
                             details)
        if mode == "wait":
            timeout = float(configuration.get("send_timeout") or DEFAULT_SEND_TIMEOUT)
            ok, meta = _bounded(lambda: app.backend.get_task_meta(task_id), timeout)
            if not ok:
                return JobResult(False, f"task {task_name} not sent: its result backend {_backend_shown(app)} "
                                        f"{_why(meta, timeout)}", details)
            state = meta.get("status", "PENDING")
            if state != "PENDING":
                # Sent before for this very run (an engine died after sending): do not send again.
                context.logger.info("celery task %s [%s] already %s; not sent again", task_name, task_id, state)
                details["sent_again"] = False
                return self._wait(app, context, task_name, task_id, details)
        failure = self._send(app, configuration, task_name, task_id, context)
        if failure is not None:
            return JobResult(False, failure, details)
        context.logger.info("sent celery task %s [%s]", task_name, task_id, extra={"action": "celery_sent"})
        if mode == "send":
            details["state"] = "SENT"
            return JobResult(True, None, details)
        return self._wait(app, context, task_name, task_id, details)

    # -- sending -------------------------------------------------------------------------
    def _send(self, app: Any, configuration: dict[str, Any], task_name: str, task_id: str,
              context: ExecutionContext) -> str | None:
        """None once the broker accepted the message, else why not (bounded in time)."""
        options: dict[str, Any] = {}
        for key in ("queue", "routing_key", "priority"):
            if configuration.get(key) is not None:
                options[key] = configuration[key]
        timeout = float(configuration.get("send_timeout") or DEFAULT_SEND_TIMEOUT)

        headers: dict[str, Any] = {"mjsched_job_id": context.job.id, "mjsched_run_id": context.run.id}
        if context.fencing_token is not None:   # the worker's writes can compare-and-set on it
            headers["mjsched_fencing_token"] = context.fencing_token
        tracing.inject(headers)   # the worker can continue the run's trace (traceparent)

        def send() -> None:
            app.send_task(task_name, args=list(configuration.get("args", [])),
                          kwargs=dict(configuration.get("kwargs", {})), task_id=task_id,
                          headers=headers,
                          retry=True, retry_policy={"max_retries": 3, "interval_start": 0,
                                                    "interval_step": 0.5, "interval_max": 1.0},
                          **options)

        ok, error = _bounded(send, timeout)
        if not ok:
            return f"task {task_name} not sent: broker {_broker_shown(app)} {_why(error, timeout)}"
        return None

    # -- waiting -------------------------------------------------------------------------
    def _wait(self, app: Any, context: ExecutionContext, task_name: str, task_id: str,
              details: dict[str, Any]) -> JobResult:
        configuration = context.job.configuration
        check_after = float(configuration.get("unregistered_check", DEFAULT_UNREGISTERED_CHECK))
        lost_after = float(configuration.get("lost_after", DEFAULT_LOST_AFTER))
        queue = task_queue(app, configuration, task_name)
        watch = LostWatch(lost_after)
        backend = app.backend
        next_probe = time.monotonic() + check_after if check_after else math.inf
        failing_since: float | None = None
        polls = 0
        while True:
            if context.cancel_event.is_set():
                return self._revoke(app, task_name, task_id, details, "the run was cancelled (max_runtime, "
                                                                      "cancel or shutdown)")
            ok, meta = _bounded(lambda: backend.get_task_meta(task_id), BACKEND_CALL_TIMEOUT)
            if ok:
                state = meta.get("status", "PENDING")
                failing_since = None
            else:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since >= BACKEND_FAILURE_BUDGET:
                    return JobResult(False, f"task {task_name} [{task_id}] sent, but its result backend "
                                            f"{_backend_shown(app)} could not be read for "
                                            f"{BACKEND_FAILURE_BUDGET:g}s: {_why(meta, BACKEND_CALL_TIMEOUT)}",
                                     details)
                state = None
            finished = _finished(state, meta, task_name, task_id, details)
            if finished is not None:
                return finished
            if state in UNFINISHED and time.monotonic() >= next_probe:
                ended = self._probe(app, context, queue, task_name, task_id, watch, details)
                if ended is not None:
                    return ended
                next_probe = time.monotonic() + PROBE_INTERVAL
            pause = POLL_INTERVALS[polls] if polls < len(POLL_INTERVALS) else 1.0
            polls += 1
            context.cancel_event.wait(pause)

    def _probe(self, app: Any, context: ExecutionContext, queue: str, task_name: str, task_id: str,
               watch: LostWatch, details: dict[str, Any]) -> JobResult | None:
        """Ask the queue's consumers where the task is; a result when the run ends on their answer."""
        ok, answer = _bounded(lambda: ask(app, queue, task_name, task_id), BACKEND_CALL_TIMEOUT)
        if not ok:
            context.logger.debug("celery task %s [%s]: the workers could not be asked: %s", task_name, task_id,
                                 answer)
            return None
        if answer.verdict == UNREGISTERED:
            _bounded(lambda: app.control.revoke(task_id), BACKEND_CALL_TIMEOUT)
            details.update(state="PENDING", queue=queue, workers=list(answer.consumers))
            return JobResult(False, f"task {task_name!r} is not registered on any worker consuming queue {queue!r} "
                                    f"({', '.join(answer.consumers)}); the message was revoked", details)
        if watch.lost_after > 0 and watch.note(answer, time.monotonic()):
            # It may have finished between the state read and the question: read it once more.
            ok, meta = _bounded(lambda: app.backend.get_task_meta(task_id), BACKEND_CALL_TIMEOUT)
            finished = _finished(meta.get("status") if ok else None, meta, task_name, task_id, details)
            if finished is not None:
                return finished
            waited = time.monotonic() - (watch.since or time.monotonic())
            details.update(state=(meta.get("status") if ok else None), lost=True, queue=queue,
                           workers=list(answer.consumers))
            context.logger.warning("celery task %s [%s] lost: no worker consuming queue %r holds it", task_name,
                                   task_id, queue, extra={"action": "celery_task_lost"})
            return JobResult(False, f"task {task_name} [{task_id}] lost: none of the workers consuming queue "
                                    f"{queue!r} ({', '.join(answer.consumers)}) holds it (active, reserved or "
                                    f"scheduled), asked {watch.count} times over {waited:.0f}s; its worker probably "
                                    "died after taking it (not revoked; a retry policy sends the tick again)",
                             details)
        return None

    def _revoke(self, app: Any, task_name: str, task_id: str, details: dict[str, Any], why: str) -> JobResult:
        ok, error = _bounded(lambda: app.control.revoke(task_id, terminate=True, signal="SIGTERM"),
                             BACKEND_CALL_TIMEOUT)
        if ok:
            details.update(state="REVOKED", revoked=True)
            return JobResult(False, f"{why}: revoked celery task {task_name} [{task_id}] (terminate=True)", details)
        details.update(revoked=False)
        return JobResult(False, f"{why}: could not revoke celery task {task_name} [{task_id}]: "
                                f"{_why(error, BACKEND_CALL_TIMEOUT)}", details)


def _bounded(call: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    """``(True, value)`` when ``call`` returned within ``timeout``, else ``(False, exception or None)``.

    Celery and its clients retry connections for as long as their settings say (the user's
    app's, which we do not change); a helper thread keeps the run's slot bounded whatever
    they say. A call that outlives its bound finishes in the background, harmlessly."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except Exception as exc:  # noqa: BLE001 - any client error is the caller's to report
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="mjsched-celery-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if "value" in outcome:
        return True, outcome["value"]
    return False, outcome.get("error")


def _why(error: Any, timeout: float) -> str:
    if error is None:
        return f"did not answer within {timeout:g}s"
    return f"refused or is unreachable: {type(error).__name__}: {error}"


def _worker(meta: dict[str, Any]) -> str | None:
    hostname = meta.get("worker")   # stored when the app sets result_extended
    return str(hostname) if hostname else None


def _broker_shown(app: Any) -> str:
    from .http import display_url

    try:
        return display_url(str(app.conf.broker_url))
    except Exception:  # noqa: BLE001
        return "<broker>"


def _backend_shown(app: Any) -> str:
    from .http import display_url

    try:
        return display_url(str(app.conf.result_backend))
    except Exception:  # noqa: BLE001
        return "<result backend>"
