"""The verbs about the engine and its database: ``init-db``, ``run`` (and --once), ``execute``,
``status``, ``config``, ``dashboard``."""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
from typing import Any

from ..errors import ConfigurationError, JobNotActive, UnknownParameter
from ..extras import install_command
from ..parameters import parse_assignment
from ..set_aside import set_aside_jobs
from ..version import __version__
from .context import Context, UsageError, resolve_job
from .runs_commands import run_lines, runs_table
from .terminal import EXIT_FAILED, EXIT_OK, GracefulStop, ago, clip, drain, table, ts

log = logging.getLogger(__name__)

SET_ASIDE_SHOWN = 100   # set-aside jobs `mjsched status` lists at most
ALERTS_SHOWN = 100     # open alerts `mjsched status` lists at most (the newest)


def cmd_init_db(ctx: Context) -> int:
    engine = ctx.engine(install=False)
    applied = engine.install()
    if ctx.json:
        ctx.emit_json({"applied": applied, "database": ctx.describe_database()})
    elif applied:
        ctx.emit(f"installed: {', '.join(applied)} on {ctx.describe_database()}")
    else:
        ctx.emit(f"schema is up to date on {ctx.describe_database()}")
    return EXIT_OK


def cmd_execute(ctx: Context) -> int:
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    parameters = dict(parse_assignment(text) for text in ctx.args.param or []) or None
    try:
        run = engine.execute_job(job.id, parameters, force=ctx.args.force)
    except JobNotActive as exc:      # worded for where it surfaces: a flag, not the API's argument
        raise JobNotActive(job.name, exc.status, remedy="add --force to run it anyway") from None
    except UnknownParameter as exc:
        raise UnknownParameter(exc.key, exc.value, exc.driver, exc.known, exc.nearest,
                               field=f"--param {exc.key}") from None
    if ctx.json:
        ctx.emit_json(run)
    else:
        for line in run_lines(run, job.name):
            ctx.emit(line)
    return EXIT_OK if run.status.value == "Completed" else EXIT_FAILED


@dataclasses.dataclass
class _Status:
    """What `mjsched status` reports, read once: the engines, the counts and the lists behind them."""
    engines: list[dict[str, Any]]
    counts: dict[str, Any]
    orphaned: dict[str, int]          # Running runs of engines that are not live, by engine
    aside: list[Any]                  # jobs set aside (a schedule no engine can compute)
    waiting: list[Any]                # due jobs a tag's limit holds back (010_tags.sql)
    open_alerts: list[Any]


def _read_status(ctx: Context) -> _Status:
    from ..liveness import LIVE, engine_state, silent_seconds

    engine = ctx.engine()
    counts = dict(engine.backend.status_summary())
    engines = counts.pop("engines", [])
    by_instance = counts.pop("running_by_instance", {}) or {}
    for e in engines:
        e["silent_seconds"] = silent_seconds(e)
        e["state"] = engine_state(e, lease_seconds=ctx.settings["lease_timeout"])
        e["stale"] = e["state"] != LIVE
    live = {e["instance"] for e in engines if e["state"] == LIVE}
    # Running runs whose engine is not live: left to lapse (the sweep makes them Abandoned).
    orphaned = {instance: runs for instance, runs in by_instance.items() if instance not in live}
    status = _Status(engines, counts, orphaned, set_aside_jobs(engine.backend, limit=SET_ASIDE_SHOWN),
                     engine.waiting_for_tag(), engine.open_alerts(limit=ALERTS_SHOWN))
    counts["orphaned_running"] = sum(orphaned.values())
    counts["set_aside"] = len(status.aside)
    counts["waiting_for_tag"] = len({w.job_id for w in status.waiting})
    counts["alerts_open"] = len(status.open_alerts)
    return status


def cmd_status(ctx: Context) -> int:
    status = _read_status(ctx)
    if ctx.json:
        ctx.emit_json({"database": ctx.describe_database(), "engines": status.engines, "counts": status.counts,
                       "orphaned_running_by_instance": status.orphaned,
                       "set_aside_jobs": [dataclasses.asdict(job) for job in status.aside],
                       "waiting_for_tag": [dataclasses.asdict(w) for w in status.waiting],
                       "open_alerts": [dataclasses.asdict(a) for a in status.open_alerts]})
        return EXIT_OK
    ctx.emit(f"database: {ctx.describe_database()}")
    ctx.emit("")
    _emit_engines(ctx, status.engines)
    _emit_problems(ctx, status)
    ctx.emit("")
    labels = [("active_jobs", "active jobs"), ("due", "due now"), ("running", "running"), ("queued", "queued"),
              ("failing", "failing (last run not Completed)"), ("abandoned_24h", "abandoned (24 h)"),
              ("orphaned_running", "orphaned (running, engine not live)"),
              ("set_aside", "set aside (schedule unusable)"),
              ("waiting_for_tag", "waiting for a tag's slot (tags list)"), ("alerts_open", "open alerts")]
    width = max(len(label) for _, label in labels)
    for key, label in labels:
        if key in status.counts:
            ctx.emit(f"{label.ljust(width)}  {status.counts[key]}")
    return EXIT_OK


def _emit_engines(ctx: Context, engines: list[dict[str, Any]]) -> None:
    from ..liveness import LIVE

    if not engines:
        ctx.emit("engines: none running (start one with `mjsched run`)")
        return
    ctx.emit(f"engines ({sum(e['state'] == LIVE for e in engines)} live of {len(engines)} registered)")
    ctx.emit(table(["INSTANCE", "HOST", "PID", "VERSION", "STARTED (UTC)", "LAST SEEN", "STATE", "RUNNING", "CAP"],
                   [[e["instance"], e["host"], e["pid"], e["version"], ts(e["started_at"]),
                     ago(e["silent_seconds"]), e["state"], e.get("running", "-"),
                     e.get("max_concurrent_jobs") or "-"] for e in engines]))


def _emit_problems(ctx: Context, status: _Status) -> None:
    """Orphaned runs, jobs set aside and open alerts: each a paragraph when there is any."""
    if status.orphaned:
        ctx.emit("")
        ctx.emit(f"orphaned: {status.counts['orphaned_running']} Running run(s) of engines that are not live "
                 f"({', '.join(f'{i} ({n})' for i, n in sorted(status.orphaned.items(), key=lambda kv: str(kv[0])))}); "
                 "they end Abandoned when their lease lapses, or now with `mjsched jobs unlock JOB`")
    if status.aside:
        ctx.emit("")
        more = f" (the first {SET_ASIDE_SHOWN})" if len(status.aside) >= SET_ASIDE_SHOWN else ""
        ctx.emit(f"set aside: {len(status.aside)} job(s){more} will not run until their definition is fixed "
                 "(a schedule no engine can compute; `mjsched jobs edit JOB --cron ...`)")
        ctx.emit(table(["JOB", "SCHEDULE", "TIMEZONE", "REASON"],
                       [[clip(j.name, 60), clip(j.schedule, 40), j.timezone, clip(j.reason, 100)]
                        for j in status.aside]))
    if status.open_alerts:
        ctx.emit("")
        more = f" (the newest {ALERTS_SHOWN})" if len(status.open_alerts) >= ALERTS_SHOWN else ""
        ctx.emit(f"open alerts: {len(status.open_alerts)}{more} (docs/guide/operations.md, \"Deadline alerts\")")
        ctx.emit(table(["JOB", "ALERT", "SINCE (UTC)", "OPENED (UTC)", "WHAT"],
                       [[clip(a.job_name, 40), a.rule, ts(a.since), ts(a.opened_at),
                         clip(a.describe() + ("; job PAUSED" if a.paused else ""), 100)] for a in status.open_alerts]))


def cmd_config(ctx: Context) -> int:
    rows = ctx.settings.describe()
    if ctx.json:
        ctx.emit_json({"config_file": ctx.settings.config_file, "settings": rows})
        return EXIT_OK
    ctx.emit(f"config file: {ctx.settings.config_file or '(none)'}")
    ctx.emit(table(["KEY", "VALUE", "FROM"], [[r["key"], clip(json.dumps(r["value"]) if not isinstance(
        r["value"], str) else r["value"], 50), r["source"]] for r in rows]))
    return EXIT_OK


def cmd_run(ctx: Context) -> int:
    settings = ctx.settings
    if not settings["enabled"]:
        print(f"mjsched: scheduled jobs are disabled (enabled = false, from {settings.label('enabled')}); "
              "not polling", file=sys.stderr)
        return EXIT_OK
    if ctx.args.once:
        return run_once(ctx)
    if ctx.args.timeout is not None:
        raise UsageError("--timeout goes with --once (a polling engine stops on SIGINT/SIGTERM)")
    engine = ctx.engine(long_running=True)
    dashboard = start_dashboard(ctx, engine)
    exporter = None
    if settings["metrics.port"]:
        from ..metrics import EngineMetrics

        exporter = EngineMetrics(engine)
        exporter.serve(settings["metrics.port"], settings["metrics.host"])
        log.info("metrics on http://%s:%d/metrics", settings["metrics.host"], settings["metrics.port"],
                 extra={"action": "metrics_started"})
    stop = GracefulStop()
    with stop.installed():
        engine.start_polling()
        log.info("mjsched %s running on %s; stop with SIGTERM or Ctrl-C (drain up to %gs)", __version__,
                 ctx.describe_database(), settings["shutdown_timeout"], extra={"action": "cli_running"})
        moved = ctx.watch_embedded(stop)
        stop.wait()
        if moved:    # its database is no longer where its connections point: nothing to drain into
            log.error("%s", moved[0], extra={"action": "embedded_moved"})
            drain(engine, 0.0, stop)
            code = EXIT_FAILED
        else:
            log.info("received %s: stopping; waiting up to %gs for running jobs", stop.signal_name,
                     settings["shutdown_timeout"], extra={"action": "cli_stopping"})
            code = drain(engine, settings["shutdown_timeout"], stop)
    if exporter is not None:
        exporter.close()
    if dashboard is not None:
        dashboard.stop()
    if moved:
        print(f"mjsched: error: {moved[0]}", file=sys.stderr, flush=True)
    return code


def run_once(ctx: Context) -> int:
    """``run --once``: one pass over what is due now, wait for those runs; exit 1 unless every
    one of them Completed within --timeout (a run still going then is handed back Cancelled)."""
    engine = ctx.engine(long_running=True)   # the runs' completions get the engine's patient retries
    runs = engine.run_due_jobs(timeout=ctx.args.timeout)
    ok = all(r.status.value == "Completed" for r in runs)
    if ctx.json:
        ctx.emit_json({"runs": runs, "ok": ok})
    elif runs:
        ctx.emit(runs_table(runs, {j.id: j.name for j in engine.list_jobs()}))
    else:
        ctx.emit("nothing was due")
    return EXIT_OK if ok else EXIT_FAILED


def cmd_dashboard(ctx: Context) -> int:
    """Serve the web dashboard until Ctrl-C/SIGTERM (needs the 'web' extra; README "Dashboard")."""
    try:
        from ..web import auth_from_env, create_app, make_dashboard_server
        from ..web.security import check_bind, parse_bind
    except ImportError as exc:
        raise ConfigurationError("dashboard", None, f"needs the 'web' extra: {install_command('web')} ({exc})") \
            from None
    host, port = parse_bind(ctx.args.bind)
    auth = auth_from_env()
    check_bind(host, auth)          # before anything is opened: a public bind needs auth
    app = create_app(ctx.engine(), read_only=ctx.args.read_only, auth=auth,
                     stale_after=float(ctx.settings["lease_timeout"]))
    server = make_dashboard_server(app, host, port)
    bound = server.server_address
    ctx.emit(f"mjsched dashboard on http://{host if ':' not in host else '[' + host + ']'}:{bound[1]}/ "
             f"({'read-only, ' if ctx.args.read_only else ''}{'auth on' if auth else 'no auth: loopback only'}); "
             "Ctrl-C to stop")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.close()
    return EXIT_OK


def start_dashboard(ctx: Context, engine: Any) -> Any:
    """``run --dashboard-port``: the dashboard of this engine in a thread of this process."""
    port = getattr(ctx.args, "dashboard_port", None)
    if port is None:
        return None
    try:
        from ..web import DashboardThread, auth_from_env, create_app
    except ImportError as exc:
        raise ConfigurationError("--dashboard-port", port, f"needs the 'web' extra: {install_command('web')} "
                                                           f"({exc})") from None
    app = create_app(engine, auth=auth_from_env(), stale_after=float(ctx.settings["lease_timeout"]))
    return DashboardThread(app, ctx.args.dashboard_host or "127.0.0.1", port).start()

