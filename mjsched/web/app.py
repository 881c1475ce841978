"""The dashboard as a WSGI application (Werkzeug routing, Jinja2 templates).

Pages: jobs, one job, runs, engines. Actions (POST, CSRF-checked, refused when
read-only): run now, pause, resume, unlock, edit. Every action leaves an audit line on
the ``mjsched.web`` logger (``action=...``). Errors are pages, never tracebacks.
"""
from __future__ import annotations

import json
import logging
import mimetypes
import os
import threading
import uuid
from datetime import datetime, timezone
from importlib import resources
from typing import Any, Callable, Iterable
from urllib.parse import quote, unquote

from jinja2 import Environment, PackageLoader, select_autoescape
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from ..cron import resolve_timezone
from ..engine import SchedulingEngine
from .. import alerts, audit
from ..alerts import Alert
from ..engine.refs import short_run_id
from ..errors import (AmbiguousRunId, ConfigurationError, DatabaseError, JobNotFound, RunNotFound, SchedulerError,
                      SchemaNotInstalled)
from ..forking import ProcessLock
from ..redaction import redact_text
from ..tags import problem as tag_problem, tag_set
from ..version import __version__
from . import humanize, schedule_form, security
from .pages import JOB_STATUSES, RUN_STATUSES, Reader
from .queries import QUERIES

log = logging.getLogger(__name__)

FLASH_COOKIE = "mjsched_flash"
STATIC_FILES = frozenset({"dashboard.css", "dashboard.js"})
EDITABLE = ("cron", "every", "run_at", "timezone", "status", "max_runtime", "jitter", "tags")   # the schedule: its kind's field
DB_SLOTS_SHARED = 2      # concurrent requests on an engine the application shares with the dashboard
DB_SLOTS_OWNED = 4       # on the dashboard's own engine (create_app(dsn))
DB_SLOT_WAIT = 10.0      # seconds a request waits for a slot before a "busy" page
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class UserError(Exception):
    """A refusal worth a page of its own (status, title, message), not a traceback."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


def _positive_page(value: str | None) -> int:
    try:
        page = int(value or 1)
    except ValueError:
        raise UserError(400, "Bad request", f"page: {value!r} is not a page number") from None
    if not 1 <= page <= 1_000_000:
        raise UserError(400, "Bad request", f"page: {page} is out of range")
    return page


def _choice(name: str, value: str | None, allowed: Iterable[str]) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise UserError(400, "Bad request", f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _tag(value: str | None) -> str | None:
    """A tag from the query or the path (None when empty); 400 naming it otherwise."""
    value = (value or "").strip()
    if not value:
        return None
    why = tag_problem(value)
    if why is not None:
        raise UserError(400, "Bad request", f"tag={value[:100]!r}: {why}")
    return value


def _until(value: str | None) -> Any:
    """The pause form's until: an ISO instant (no offset: UTC), else a duration the engine reads."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _job_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise UserError(404, "Not found", f"no job has the id {value!r}") from None


_REMAKE_LOCK = ProcessLock()   # Dashboard._own_engine_here: each process's own


class Dashboard:
    """The WSGI application ``create_app`` returns; ``close()`` frees what it opened."""

    def __init__(self, engine: SchedulingEngine, *, owns_engine: bool, read_only: bool,
                 auth: security.Auth | None, stale_after: float,
                 authorize: Callable[[Any], Any] | None = None,
                 remake: Callable[[], SchedulingEngine] | None = None) -> None:
        """``remake``: how to make the dashboard's own engine again in a forked process."""
        if engine.backend.dialect not in QUERIES:
            raise ConfigurationError("dsn_or_engine", engine.backend.dialect,
                                     f"the dashboard reads {', '.join(sorted(QUERIES))} databases")
        self.engine = engine
        self._pid = os.getpid()
        self._remake = remake if owns_engine else None
        self.reader = Reader(engine.backend)
        self.read_only = read_only
        self.auth = auth
        self.authorize = authorize
        self.stale_after = float(stale_after)
        self._owns_engine = owns_engine
        # At most this many requests use the database at once: an engine shared with the dashboard
        # keeps the rest of its connection pool for its poller, heartbeats and completions.
        self._db_slots = self._new_slots()
        self.templates = Environment(loader=PackageLoader("mjsched.web", "templates"),
                                     autoescape=select_autoescape(default=True, default_for_string=True))
        self.templates.filters.update(duration=humanize.duration, span=humanize.span, age_from=humanize.age,
                                      short_run_id=short_run_id)
        self.templates.globals.update(version=__version__, JOB_STATUSES=JOB_STATUSES, RUN_STATUSES=RUN_STATUSES)
        self.url_map = Map([
            Rule("/", endpoint="index", methods=["GET"]),
            Rule("/jobs", endpoint="jobs", methods=["GET"]),
            Rule("/jobs/<job_id>", endpoint="job", methods=["GET"]),
            Rule("/jobs/<job_id>/preview", endpoint="preview", methods=["GET"]),
            Rule("/jobs/<job_id>/<any(run, pause, resume, unlock, edit):action>", endpoint="action",
                 methods=["POST"]),
            Rule("/tags/<tag>/<any(pause, resume):action>", endpoint="tag_action", methods=["POST"]),
            Rule("/runs", endpoint="runs", methods=["GET"]),
            Rule("/runs/<run_id>/cancel", endpoint="run_cancel", methods=["POST"]),
            Rule("/engines", endpoint="engines", methods=["GET"]),
            Rule("/static/<name>", endpoint="static", methods=["GET"]),
        ], strict_slashes=False)

    def _new_slots(self) -> threading.BoundedSemaphore:
        return threading.BoundedSemaphore(DB_SLOTS_OWNED if self._owns_engine else DB_SLOTS_SHARED)

    def _own_engine_here(self) -> None:
        """In a process forked after create_app (an app mounted at import under gunicorn
        --preload, or uWSGI without lazy-apps): new request slots (the parent's requests held
        some at the fork, and a parent's thread may have held the semaphore's lock), and an
        engine the dashboard made itself is made again, as the inherited copy refuses every
        call there (docs/guide/deployment.md). An engine the caller gave is the caller's to
        make after the fork."""
        if os.getpid() == self._pid:
            return
        with _REMAKE_LOCK:
            if os.getpid() != self._pid:
                self._db_slots = self._new_slots()
                if self._remake is not None:
                    self.engine = self._remake()
                    self.reader = Reader(self.engine.backend)
                self._pid = os.getpid()

    # -- WSGI ---------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        self._own_engine_here()
        request = Request(environ)
        response = self._respond(request)
        return response(environ, start_response)

    def close(self) -> None:
        if self._owns_engine:
            self.engine.close()

    def _respond(self, request: Request) -> Response:
        request.csrf_token = request.cookies.get(security.CSRF_COOKIE) or security.new_csrf_token()  # type: ignore[attr-defined]
        request.user = None  # type: ignore[attr-defined]
        try:
            if self.auth is not None:
                user = self.auth.check(request.headers.get("Authorization"))
                if user is None:
                    return self._finish(request, self._unauthorized(request))
                request.user = user  # type: ignore[attr-defined]
            refusal = self._gate(request)
            if refusal is not None:
                return self._finish(request, refusal)
            adapter = self.url_map.bind_to_environ(request.environ)
            endpoint, args = adapter.match()
            if endpoint == "static":
                response = self.on_static(request, **args)
            else:
                if not self._db_slots.acquire(timeout=DB_SLOT_WAIT):
                    raise UserError(503, "Busy", "Too many dashboard requests at once; try again in a moment.")
                try:
                    # who changes jobs from here, for the audit trail (013_audit.sql)
                    with audit.changes_by(getattr(request, "user", None) or None, via="dashboard"):
                        response = getattr(self, f"on_{endpoint}")(request, **args)
                finally:
                    self._db_slots.release()
        except UserError as exc:
            response = self._error_page(request, exc.status, exc.title, exc.message)
        except JobNotFound as exc:
            response = self._error_page(request, 404, "Not found", str(exc))
        except MethodNotAllowed:
            response = self._error_page(request, 405, "Method not allowed", "This address does not take that method.")
        except NotFound:
            response = self._error_page(request, 404, "Not found", "There is no page at this address.")
        except HTTPException as exc:
            response = self._error_page(request, exc.code or 400, exc.name, exc.description or "")
        except (DatabaseError, SchemaNotInstalled) as exc:
            log.warning("dashboard request %s %s failed: %s", request.method, request.path, exc,
                        extra={"action": "web_error"})
            response = self._error_page(request, 503, "The scheduler's database did not answer",
                                        redact_text(str(exc)))
        except SchedulerError as exc:      # bad input the engine refused: the message names field and value
            response = self._error_page(request, 400, "Refused", redact_text(str(exc)))
        except Exception:  # noqa: BLE001 - a page, never a traceback; the log has the details
            incident = uuid.uuid4().hex[:10]
            log.exception("dashboard request %s %s failed (incident %s)", request.method, request.path, incident,
                          extra={"action": "web_error"})
            response = self._error_page(request, 500, "Something went wrong",
                                        f"The error was logged as incident {incident}.")
        return self._finish(request, response)

    def _finish(self, request: Request, response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if response.mimetype == "text/html":
            response.headers["Cache-Control"] = "no-store"
        if request.cookies.get(security.CSRF_COOKIE) != request.csrf_token:  # type: ignore[attr-defined]
            response.set_cookie(security.CSRF_COOKIE, request.csrf_token,  # type: ignore[attr-defined]
                                path=self._cookie_path(request), httponly=True, samesite="Strict",
                                secure=request.scheme == "https")
        return response

    def _gate(self, request: Request) -> Response | None:
        """Who may use it (module security): ``authorize`` decides when given (its str names the
        user in audit lines; an exception refuses); else, without ``auth``, local requests only."""
        if self.authorize is None:
            if self.auth is not None or security.is_local_request(request.environ):
                return None
            log.info("refused a non-local request from %s for %s: no authorize= was given", request.remote_addr,
                     request.path, extra={"action": "web_refused", "reason": "not_local"})
            return self._error_page(request, 403, "Local requests only",
                                    "This dashboard answers requests from this machine only. The application that "
                                    "mounts it lets its users in with create_app(..., authorize=...).")
        try:
            verdict = self.authorize(request.environ.get(security.HOST_REQUEST, request))
        except Exception:  # noqa: BLE001 - a broken check refuses (fails closed) and is logged
            log.exception("authorize= raised for %s %s; refused", request.method, request.path,
                          extra={"action": "web_refused", "reason": "authorize_failed"})
            verdict = False
        if not verdict:
            return self._error_page(request, 403, "Forbidden", "The application does not let you use this dashboard.")
        if isinstance(verdict, str):
            request.user = verdict[:100]  # type: ignore[attr-defined]
        return None

    @staticmethod
    def _cookie_path(request: Request) -> str:
        return (request.script_root or "") + "/"

    def _unauthorized(self, request: Request) -> Response:
        response = self._error_page(request, 401, "Sign in", "This dashboard needs credentials.")
        response.headers["WWW-Authenticate"] = 'Basic realm="mjsched", charset="UTF-8"'
        return response

    # -- rendering ----------------------------------------------------------------------------------
    def _render(self, request: Request, template: str, http_status: int = 200, **context: Any) -> Response:
        flash = None
        raw = request.cookies.get(FLASH_COOKIE)
        if raw:
            try:
                flash = json.loads(unquote(raw))
            except ValueError:
                flash = None
        html = self.templates.get_template(template).render(
            request=request, root=request.script_root or "", csrf_token=request.csrf_token,  # type: ignore[attr-defined]
            read_only=self.read_only, flash=flash if isinstance(flash, dict) else None,
            user=request.user, **context)  # type: ignore[attr-defined]
        response = Response(html, status=http_status, mimetype="text/html")
        if raw:
            response.delete_cookie(FLASH_COOKIE, path=self._cookie_path(request))
        return response

    def _error_page(self, request: Request, status: int, title: str, message: str) -> Response:
        try:
            return self._render(request, "error.html", http_status=status, title=title, message=message)
        except Exception:  # noqa: BLE001 - the error page itself failed: plain text, still no traceback
            log.exception("dashboard error page failed", extra={"action": "web_error"})
            return Response(f"{status} {title}", status=status, mimetype="text/plain")

    def _redirect(self, request: Request, location: str, kind: str, message: str) -> Response:
        response = Response(status=303, headers={"Location": (request.script_root or "") + location})
        response.set_cookie(FLASH_COOKIE, quote(json.dumps({"kind": kind, "message": message})),
                            path=self._cookie_path(request), httponly=True, samesite="Strict", max_age=60)
        return response

    # -- pages ------------------------------------------------------------------------------------------
    def on_index(self, request: Request) -> Response:
        return Response(status=302, headers={"Location": (request.script_root or "") + "/jobs"})

    def on_static(self, request: Request, name: str) -> Response:
        if name not in STATIC_FILES:
            raise NotFound()
        data = resources.files("mjsched.web").joinpath("static", name).read_bytes()
        response = Response(data, mimetype=mimetypes.guess_type(name)[0] or "application/octet-stream")
        response.headers["Cache-Control"] = "max-age=300"
        return response

    def on_jobs(self, request: Request) -> Response:
        status = _choice("status", request.args.get("status"), JOB_STATUSES)
        search = (request.args.get("q") or "").strip()[:200] or None
        tag = _tag(request.args.get("tag"))
        page = _positive_page(request.args.get("page"))
        summary = self.reader.summary()
        data = self.reader.jobs(status=status, search=search, page=page, now=summary["now"], tag=tag)
        alerts_by_job: dict[str, list[Any]] = {}
        for alert in self._open_alerts(None):
            alerts_by_job.setdefault(alert.job_id, []).append(alert)
        return self._render(request, "jobs.html", nav="jobs", status=status, q=search or "", tag=tag, summary=summary,
                            set_aside=self.reader.set_aside(), alerts_by_job=alerts_by_job, **data)

    def _open_alerts(self, job_id: str | None) -> list[Any]:
        """Open deadline alerts (of one job); none on a schema without them (014_alerts.sql)."""
        # through the backend, as every page reads: it works in a forked worker too (deployment.md)
        try:
            return [Alert.from_row(r) for r in self.engine.backend.open_alerts(job_id, 200)]
        except (JobNotFound, NotImplementedError):
            return []
        except DatabaseError as exc:
            log.warning("open alerts not read: %s", exc, extra={"action": "web_error"})
            return []

    def _alert_rules(self, job_id: str) -> dict[str, Any]:
        try:
            return alerts.as_keywords(self.engine.backend.job_alert_rules(job_id))
        except (JobNotFound, NotImplementedError):
            return {}
        except DatabaseError as exc:
            log.warning("alert rules of job %s not read: %s", job_id, exc, extra={"action": "web_error"})
            return {}

    def on_tag_action(self, request: Request, tag: str, action: str) -> Response:
        """Pause (with the form's reason and until) or resume every job carrying ``tag``."""
        self._check_action(request, f"{action}_tag", tag)
        tag = _tag(tag) or ""
        back = f"/jobs?tag={quote(tag)}"
        user = getattr(request, "user", None)
        try:
            if action == "pause":
                until = (request.form.get("until") or "").strip() or None
                count = self.engine.pause_jobs(tag=tag, reason=(request.form.get("reason") or "").strip() or None,
                                               until=_until(until), user=f"{user} (dashboard)" if user else None)
            else:
                count = self.engine.resume_jobs(tag=tag)
        except SchedulerError as exc:
            self._audit(request, f"{action}_tag", tag, "refused", str(exc))
            return self._redirect(request, back, "error", f"{action} of tag {tag} refused: {redact_text(str(exc))}")
        message = f"{count} job(s) tagged {tag} {action}d."
        self._audit(request, f"{action}_tag", tag, "ok", message)
        return self._redirect(request, back, "ok", message)

    def on_job(self, request: Request, job_id: str, form: dict[str, str] | None = None,
               form_error: str | None = None, status_code: int = 200) -> Response:
        job_id = _job_id(job_id)
        job = self.reader.job(job_id)
        if job is None:
            raise UserError(404, "Not found", f"no job has the id {job_id}")
        known = job.pop("secret_values")
        run_status = _choice("status", request.args.get("status"), RUN_STATUSES)
        page = _positive_page(request.args.get("page"))
        try:
            next_runs = self.reader.next_runs(job["cron_expression"], job["timezone"], job=job) \
                if job["status"] == "Active" else []
            schedule_error = None
        except SchedulerError as exc:
            next_runs, schedule_error = [], str(exc)
        summary = self.reader.summary()
        now = summary["now"]
        record = self.reader.pause_record(job_id)
        kind = schedule_form.kind_of(job["cron_expression"], job["interval_seconds"], job["run_at"])
        job["schedule_kind"], job["schedule_kind_name"] = kind, schedule_form.KINDS[kind]
        job["schedule_value"] = schedule_form.field_value(kind, job["cron_expression"], job["interval_seconds"],
                                                          job["run_at"], job["timezone"])
        form = form or {kind: job["schedule_value"], "timezone": job["timezone"], "status": job["status"],
                        "max_runtime": "" if job["max_runtime_seconds"] is None else f"{job['max_runtime_seconds']:g}",
                        "jitter": "" if job.get("jitter_seconds") is None else str(job["jitter_seconds"]),
                        "tags": ", ".join(record["tags"])}
        why, why_at, why_error = self._why(job_id, job["timezone"], request.args.get("why_at"))
        return self._render(request, "job.html", http_status=status_code, nav="jobs", job=job, now=now, **record,
                            declared=job["name"] in self.engine.declared_names,
                            next_runs=next_runs, schedule_error=schedule_error, run_status=run_status, summary=summary,
                            chart=self.reader.duration_chart(job_id), form=form, form_error=form_error,
                            changes=self._changes(job_id), why=why, why_at=why_at, why_error=why_error,
                            open_alerts=self._open_alerts(job_id), alert_rules=self._alert_rules(job_id),
                            **self.reader.job_runs(job_id, status=run_status, page=page, known=known))

    def _why(self, job_id: str, zone: str, at_text: str | None) -> tuple[Any, str, str | None]:
        """The why-panel's report (engine.why, mjsched/why.py) for the job's next tick, or for the
        tick at ``why_at`` (ISO 8601; without an offset, in the job's timezone); a report that
        cannot be made leaves the rest of the page as it is, with the reason in its place."""
        text = (at_text or "").strip()[:64]
        try:
            at = None
            if text:
                try:
                    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
                except ValueError:
                    return None, text, f"{text!r} is not an ISO 8601 date/time, e.g. 2030-01-31T03:00"
                if at.tzinfo is None:
                    at = at.replace(tzinfo=resolve_timezone(zone))
            return self.engine.why(job_id, at=at), text, None
        except (DatabaseError, SchedulerError) as exc:
            return None, text, redact_text(str(exc))

    def _changes(self, job_id: str) -> list[Any]:
        """The job page's newest changes (masked); none on a schema without the audit trail."""
        try:
            return [audit.masked(c) for c in self.engine.backend.job_history(job_id, None, 20)]
        except (JobNotFound, NotImplementedError):
            return []
        except DatabaseError as exc:
            log.warning("audit trail of job %s not read: %s", job_id, exc, extra={"action": "web_error"})
            return []

    def on_preview(self, request: Request, job_id: str) -> Response:
        """The edit form's live check: the next runs of the schedule being typed (a cron, or an
        interval anchored as the job's, or a one-off instant) in a zone, with the jitter (H and the
        jitter hashed from the job's name), or why they are wrong."""
        kind = next((k for k in ("every", "run_at") if k in request.args), "cron")
        text = (request.args.get(kind) or "").strip()
        timezone = (request.args.get("timezone") or "UTC").strip()
        jitter = (request.args.get("jitter") or "").strip()
        job = self.reader.job(_job_id(job_id))
        if job is None:
            raise UserError(404, "Not found", f"no job has the id {job_id}")
        try:
            words, times = schedule_form.preview(kind, text, timezone, job.get("start_at") or job.get("created_at"),
                                                 name=job["name"], jitter=_jitter_field(jitter))
            body = {"ok": True, "words": words, "times": [t.isoformat(sep=" ") for t in times]}
        except SchedulerError as exc:
            body = {"ok": False, "error": str(exc)}
        response = Response(json.dumps(body), mimetype="application/json")
        response.headers["Cache-Control"] = "no-store"
        return response

    def on_runs(self, request: Request) -> Response:
        status = _choice("status", request.args.get("status"), RUN_STATUSES)
        page = _positive_page(request.args.get("page"))
        listing = self.reader.runs_with_status(status, page) if status else None
        return self._render(request, "runs.html", nav="runs", status=status, listing=listing,
                            running=self.reader.running() if not status else [],
                            problems=self.reader.problems() if not status else [],
                            summary=self.reader.summary())

    def on_engines(self, request: Request) -> Response:
        return self._render(request, "engines.html", nav="engines", stale_after=self.stale_after,
                            engines=self.reader.engines(self.stale_after), summary=self.reader.summary())

    # -- actions ------------------------------------------------------------------------------------------
    def _check_action(self, request: Request, action: str, target: str) -> None:
        """Every action's gate: not read-only, same origin, the form's CSRF token (refusals audited)."""
        if self.read_only:
            self._audit(request, action, target, "refused", "read-only dashboard")
            raise UserError(403, "Read-only", "This dashboard is read-only: actions are turned off.")
        if not security.same_origin(request.headers.get("Origin"), request.host):
            self._audit(request, action, target, "refused", f"cross-origin request from {request.headers.get('Origin')!r}")
            raise UserError(403, "Forbidden", "A page of another site tried to change this dashboard.")
        if not security.csrf_ok(request.cookies.get(security.CSRF_COOKIE), request.form.get(security.CSRF_FIELD)):
            self._audit(request, action, target, "refused", "missing or wrong CSRF token")
            raise UserError(403, "Forbidden", "The form's security token is missing or stale: reload the page "
                                              "and try again.")

    def on_run_cancel(self, request: Request, run_id: str) -> Response:
        """Cancel a Queued or Running run (engine.cancel_run): back to its job's page with a flash."""
        self._check_action(request, "cancel", run_id)
        try:
            run = self.engine.get_run(run_id)    # the id, a unique prefix or the short id shown
        except RunNotFound as exc:
            raise UserError(404, "Not found", str(exc)) from None
        except AmbiguousRunId as exc:
            raise UserError(409, "Ambiguous run id", str(exc)) from None
        run_id = run.id
        back = f"/jobs/{run.scheduled_job_id}"
        who = f"dashboard user {getattr(request, 'user', None) or '-'} from {request.remote_addr or '?'}"
        try:
            self.engine.cancel_run(run_id, requested_by=who[:255])
        except SchedulerError as exc:
            self._audit(request, "cancel", run_id, "refused", str(exc))
            return self._redirect(request, back, "error", f"cancel refused: {redact_text(str(exc))}")
        if run.status.value == "Queued":
            message = f"Run {short_run_id(run_id)} cancelled: it was queued and will not run."
        else:
            message = (f"Cancel of run {short_run_id(run_id)} requested: its engine ({run.executed_by_instance or '?'}) "
                       "stops it at its next lease renewal and records it Cancelled.")
        self._audit(request, "cancel", run_id, "ok", message)
        return self._redirect(request, back, "ok", message)

    def on_action(self, request: Request, job_id: str, action: str) -> Response:
        self._check_action(request, action, job_id)
        job_id = _job_id(job_id)
        job = self.engine.get_job(job_id)
        back = f"/jobs/{job.id}"
        if action == "edit":
            return self._edit(request, job, back)
        try:
            message = getattr(self, f"_do_{action}")(job)
        except UserError as exc:
            self._audit(request, action, job.id, "refused", exc.message, job.name)
            return self._redirect(request, back, "error", exc.message)
        except SchedulerError as exc:
            self._audit(request, action, job.id, "failed", str(exc), job.name)
            return self._redirect(request, back, "error", f"{action} failed: {redact_text(str(exc))}")
        self._audit(request, action, job.id, "ok", message, job.name)
        return self._redirect(request, back, "ok", message)

    def _do_run(self, job: Any) -> str:
        if job.status.value != "Active":
            raise UserError(409, "Not active", f"{job.name} is {job.status.value}: resume it to run it "
                                               f"(or `mjsched execute --force {job.id}`).")
        if not self.reader.request_run(job.id):
            raise UserError(409, "Running", f"{job.name} is running now (held by {job.locked_by_instance or '?'}); "
                                            "it was not requested again.")
        self.engine.on_job_changed()
        return f"Run of {job.name} requested: an engine starts it at its next poll."

    def _do_pause(self, job: Any) -> str:
        self.engine.pause_job(job.id)
        return f"{job.name} paused."

    def _do_resume(self, job: Any) -> str:
        resumed = self.engine.resume_job(job.id)
        when = resumed.next_run_at.isoformat(sep=" ", timespec="seconds") if resumed.next_run_at else "-"
        return f"{job.name} resumed; next run {when}."

    def _do_unlock(self, job: Any) -> str:
        if self.engine.unlock_job(job.id):
            return f"{job.name} unlocked: the run that held it is Abandoned."
        return f"{job.name} was not locked; nothing to unlock."

    def _edit(self, request: Request, job: Any, back: str) -> Response:
        form = {k: (request.form.get(k) or "").strip() for k in EDITABLE}
        kind = job.schedule_kind      # the form edits the job's own kind (module schedule_form)
        try:
            changes: dict[str, Any] = schedule_form.change(kind, form[kind], job, form["timezone"] or job.timezone)
        except SchedulerError as exc:
            return self._edit_refused(request, job, form, redact_text(str(exc)))
        if form["timezone"] != job.timezone:
            changes["timezone"] = form["timezone"]
        if form["status"] != job.status.value:
            changes["status"] = form["status"]
        try:
            max_runtime = float(form["max_runtime"]) if form["max_runtime"] else None
        except ValueError:
            return self._edit_refused(request, job, form, f"max_runtime: {form['max_runtime']!r} is not a number "
                                                          "of seconds")
        if max_runtime != job.max_runtime_seconds:
            changes["max_runtime"] = max_runtime
        try:
            jitter = _jitter_field(form["jitter"])
            tags = tag_set(form["tags"])
        except SchedulerError as exc:
            return self._edit_refused(request, job, form, str(exc))
        if jitter != job.jitter_seconds:
            changes["jitter"] = jitter
        if tags != job.tags:
            changes["tags"] = tags
        if not changes:
            return self._redirect(request, back, "ok", "Nothing changed.")
        try:
            updated = self.engine.update_job(job.id, **changes)
        except SchedulerError as exc:
            return self._edit_refused(request, job, form, redact_text(str(exc)))
        described = ", ".join(f"{k}={v.isoformat() if isinstance(v, datetime) else repr(v)}"
                              for k, v in changes.items())
        self._audit(request, "edit", job.id, "ok", described, job.name)
        return self._redirect(request, back, "ok", f"{updated.name} saved: {described}.")

    def _edit_refused(self, request: Request, job: Any, form: dict[str, str], error: str) -> Response:
        self._audit(request, "edit", job.id, "refused", error, job.name)
        return self.on_job(request, job.id, form=form, form_error=error, status_code=400)

    def _audit(self, request: Request, action: str, job_id: str, outcome: str, detail: str,
               job_name: str | None = None) -> None:
        user = getattr(request, "user", None) or "-"
        log.info("audit action=%s outcome=%s job=%r id=%s user=%s remote=%s: %s", action, outcome, job_name,
                 job_id, user, request.remote_addr, redact_text(detail),
                 extra={"action": f"web_{action}", "outcome": outcome, "job_id": job_id, "user": user})


def create_app(dsn_or_engine: str | SchedulingEngine, *, read_only: bool = False, auth: Any = None,
               stale_after: float = 600.0, authorize: Callable[[Any], Any] | None = None) -> Dashboard:
    """The dashboard as a WSGI application.

    ``dsn_or_engine``: a database URL (the dashboard opens its own, non-polling engine for
    reads and edits) or an existing :class:`SchedulingEngine` (shared, not closed by the
    dashboard). ``read_only`` hides and refuses every action. ``auth``: None, a
    :class:`TokenAuth`, a :class:`BasicAuth`, ``"token:T"`` or ``"basic:USER:PASSWORD"``;
    required by :func:`serve` beyond loopback. ``stale_after``: seconds without a
    heartbeat after which an engine is shown stale (engines renew every lease/4).
    ``authorize``: a callable on each request that says who may use the dashboard, so a
    host application's login decides; it gets Django's ``HttpRequest`` under
    :func:`~mjsched.web.mounts.django_view`, else the dashboard's Werkzeug ``Request``
    (``request.environ`` is the WSGI environ). Truthy lets the request in (a str names the
    user in audit lines); falsy or an exception answers 403. Without ``authorize`` and
    ``auth`` the dashboard answers local requests only (``security.is_local_request``).
    """
    if authorize is not None and not callable(authorize):
        raise ConfigurationError("authorize", type(authorize).__name__, "must be a callable taking the request")
    parsed = security.parse_auth(auth)
    if not isinstance(read_only, bool):
        raise ConfigurationError("read_only", read_only, "must be True or False")
    if isinstance(stale_after, bool) or not isinstance(stale_after, (int, float)) or not stale_after > 0:
        raise ConfigurationError("stale_after", stale_after, "must be a positive number of seconds")
    if isinstance(dsn_or_engine, SchedulingEngine):
        return Dashboard(dsn_or_engine, owns_engine=False, read_only=read_only, auth=parsed,
                         stale_after=stale_after, authorize=authorize)
    if not isinstance(dsn_or_engine, str) or not dsn_or_engine:
        raise ConfigurationError("dsn_or_engine", type(dsn_or_engine).__name__,
                                 "must be a database URL or a SchedulingEngine")
    def make() -> SchedulingEngine:
        return SchedulingEngine(dsn_or_engine, max_concurrent_jobs=4, instance_name="mjsched-dashboard")
    engine = make()
    try:
        return Dashboard(engine, owns_engine=True, read_only=read_only, auth=parsed, stale_after=stale_after,
                         authorize=authorize, remake=make)
    except BaseException:
        engine.close()
        raise


def _jitter_field(text: str) -> int | None:
    """The form's jitter: seconds or a duration such as '90s', '5m' (empty: none)."""
    from ..schedules import parse_jitter

    text = text.strip()
    return parse_jitter(int(text) if text.isdigit() else text or None, "jitter")
