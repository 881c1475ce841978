"""The argument parser: the global flags, then one builder per verb (group), each naming
its handler (set_defaults(handler=...)). Handlers never import this module."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, NoReturn, Sequence

from ..version import __version__
from .context import Context
from .demo import cmd_demo
from .engine_commands import cmd_config, cmd_dashboard, cmd_execute, cmd_init_db, cmd_run, cmd_status
from .jobs_commands import (cmd_jobs_add, cmd_jobs_apply, cmd_jobs_edit, cmd_jobs_import_celery, cmd_jobs_list,
                            cmd_jobs_history, cmd_jobs_pause, cmd_jobs_preview, cmd_jobs_remove, cmd_jobs_resume,
                            cmd_jobs_show, cmd_jobs_unlock, cmd_jobs_why)
from .runs_commands import cmd_runs, cmd_runs_cancel, cmd_runs_prune, cmd_runs_show
from .tags_commands import cmd_tags_limit, cmd_tags_list
from .terminal import EXIT_USAGE

JOB_STATUSES = ("Pending", "Active", "Paused", "Disabled", "Expired")
RUN_STATUSES = ("Queued", "Running", "Completed", "Failed", "Timeout", "Cancelled", "Abandoned", "Skipped")


class Parser(argparse.ArgumentParser):
    """argparse, with one-line errors and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def enum_arg(allowed: Sequence[str]) -> Callable[[str], str]:
    """Accept enum values case-insensitively ("skip" -> "Skip"); validation reports bad ones."""
    def convert(text: str) -> str:
        for value in allowed:
            if value.lower() == text.lower():
                return value
        return text
    return convert


def _common() -> Parser:
    common = Parser(add_help=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, metavar="DSN",
                        help="database URL (postgresql://... or mssql://...); default: $MJSCHED_DSN, the config "
                             "file, else the embedded PostgreSQL")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print machine-readable JSON")
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more log output (-v: info, -vv: debug)")
    common.add_argument("--app-dir", action="append", default=argparse.SUPPRESS, metavar="DIR",
                        help="import the application's modules (python jobs, a Celery app) from DIR too: put first on "
                             "sys.path, before the working directory, which is always there (repeatable)")
    return common


# add(parent, name, handler, help_text, **kw) -> the new subcommand's parser (see _verb_adder).
AddVerb = Callable[..., Any]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global flags, then each verb group from its own builder, in --help order."""
    common = _common()
    parser = _top_parser(common)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    add = _verb_adder(common)
    add(sub, "init-db", cmd_init_db, "create or upgrade the mjsched schema and procedures (idempotent)")
    _add_run(sub, add)
    _add_jobs(sub, add, common)
    _add_execute(sub, add)
    _add_runs(sub, add)
    _add_tags(sub, add, common)
    add(sub, "status", cmd_status, "engines seen, and how many jobs are due, running, queued, failing, abandoned")
    add(sub, "config", cmd_config, "the effective settings and where each comes from")
    _add_dashboard(sub, add)
    _add_demo(sub, add)
    return parser


def _top_parser(common: Parser) -> Parser:
    """``mjsched`` itself: the global flags, and --config and --version, which come before the command."""
    parser = Parser(prog="mjsched", parents=[common],
                    description="Cron-scheduled jobs out of a SQL database, safely, on one server or many.",
                    epilog="Exit codes: 0 ok, 1 a run failed, 2 bad usage or input. Settings: flags > MJSCHED_* "
                           "environment > TOML file (--config, else ./mjsched.toml) > defaults.")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML settings file (default: $MJSCHED_CONFIG, else ./mjsched.toml if present); "
                             "give it before the command")
    parser.add_argument("--version", action="version", version=f"mjsched {__version__}")
    return parser


def _verb_adder(common: Parser) -> AddVerb:
    """Subcommands take the global flags after their name too, and their help line is their description."""
    def add(parent: Any, name: str, handler: Callable[[Context], int], help_text: str, **kw: Any) -> Any:
        p = parent.add_parser(name, parents=[common], help=help_text, description=help_text, **kw)
        p.set_defaults(handler=handler)
        return p
    return add


def _add_run(sub: Any, add: AddVerb) -> None:
    """``run``: an engine in the foreground, and the settings it takes as flags."""
    run = add(sub, "run", cmd_run, "run an engine: poll until SIGINT/SIGTERM, then drain running jobs "
                                   "(bounded) and exit 0; --once: run what is due now, wait, exit")
    run.add_argument("--once", action="store_true",
                     help="run what is due now (claiming again as slots free up), wait for those runs and exit: "
                          "0 if all Completed, else 1 (for system cron and scripts)")
    run.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="with --once: wait at most this long for the runs (default: no bound)")
    run.add_argument("--max-concurrent-jobs", type=int, metavar="N", help="hard cap on runs at once (default 5)")
    run.add_argument("--lease", type=float, metavar="SECONDS", help="lease of a claimed run (default 600)")
    run.add_argument("--min-poll-interval", type=float, metavar="SECONDS")
    run.add_argument("--max-poll-interval", type=float, metavar="SECONDS", help="longest idle sleep (default 10)")
    run.add_argument("--instance-name", metavar="NAME", help="engine name (default <host>-<pid>)")
    run.add_argument("--allowed-drivers", action="append", metavar="NAMES",
                     help="drivers this engine may run, comma-separated or repeated (default: all); a job of "
                          "another driver ends Failed here")
    run.add_argument("--celery-allowed-apps", action="append", metavar="PATHS",
                     help="celery app paths ('pkg.module:app') a celery job may name, comma-separated or "
                          "repeated (default: any); others end Failed, never imported")
    run.add_argument("--celery-allowed-brokers", action="append", metavar="URLS",
                     help="broker / result backend URLs a celery job may name (default: any)")
    run.add_argument("--keep-runs-days", type=int, metavar="DAYS", dest="engine_keep_runs_days",
                     help="retention default: keep finished runs this many days (0: off; a job's own setting wins)")
    run.add_argument("--keep-runs-count", type=int, metavar="N", dest="engine_keep_runs_count",
                     help="retention default: keep each job's newest N finished runs (0: off)")
    run.add_argument("--purge-interval", type=float, metavar="SECONDS",
                     help="purge run history at most this often (default 10)")
    run.add_argument("--alert-interval", type=float, metavar="SECONDS",
                     help="evaluate deadline alerts at most this often (default 15)")
    run.add_argument("--shutdown-timeout", type=float, metavar="SECONDS",
                     help="on SIGINT/SIGTERM wait at most this long for running jobs (default 30)")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="serve Prometheus metrics on this port (needs the 'metrics' extra)")
    run.add_argument("--metrics-host", metavar="ADDR", help="address for --metrics-port (default 127.0.0.1)")
    run.add_argument("--dashboard-port", type=int, metavar="PORT",
                     help="serve the web dashboard of this engine on this port (needs the 'web' extra)")
    run.add_argument("--dashboard-host", metavar="ADDR",
                     help="address for --dashboard-port (default 127.0.0.1; any other needs MJSCHED_DASHBOARD_TOKEN "
                          "or MJSCHED_DASHBOARD_USER/PASSWORD)")


def _add_jobs(sub: Any, add: AddVerb, common: Parser) -> None:
    """``jobs ACTION``: one builder per action; without an ACTION it prints its help."""
    jobs = sub.add_parser("jobs", parents=[common],
                          help="add, edit, apply, list, show, history, pause, resume, remove, unlock, preview "
                               "jobs; why one did not run",
                          description="Manage jobs. A JOB is an id (a UUID) or a name (names are unique; a value "
                                      "that is not a UUID is a name), or a unique id prefix of 4+ characters.")
    jobs.set_defaults(handler=lambda ctx: _missing_subcommand(jobs))
    jsub = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", parser_class=Parser)
    _add_jobs_add(jsub, add)
    _add_jobs_edit(jsub, add)
    _add_jobs_apply(jsub, add)
    _add_jobs_list(jsub, add)
    _add_jobs_by_ref(jsub, add)
    _add_jobs_preview(jsub, add)
    _add_jobs_why(jsub, add)
    _add_jobs_import_celery(jsub, add)


def _add_tags(sub: Any, add: AddVerb, common: Parser) -> None:
    """``tags list`` / ``tags limit TAG N|none``."""
    tags = sub.add_parser("tags", parents=[common], help="list tags; set a tag's cluster-wide concurrency limit",
                          description="The tags of the jobs: how many jobs carry each, its limit, its running "
                                      "runs and the due jobs the limit holds back.")
    tags.set_defaults(handler=lambda ctx: _missing_subcommand(tags))
    tsub = tags.add_subparsers(dest="tags_command", metavar="ACTION", parser_class=Parser)
    add(tsub, "list", cmd_tags_list, "every tag: jobs, limit, running, waiting")
    tl = add(tsub, "limit", cmd_tags_limit, "at most N runs of the tag's jobs at once, across every engine "
                                            "(manual runs are not held back, but count); none lifts it")
    tl.add_argument("tag", metavar="TAG")
    tl.add_argument("limit", metavar="N|none")


def _add_jobs_add(jsub: Any, add: AddVerb) -> None:
    """``jobs add``: one of --cron, --every, --run-at is required; the rest have create_job's defaults."""
    ja = add(jsub, "add", cmd_jobs_add, "create a job")
    ja.add_argument("--name", required=True)
    ja.add_argument("--driver", required=True, help="shell, python, sql, http, or a registered driver")
    kinds = ja.add_mutually_exclusive_group(required=True)
    kinds.add_argument("--cron", help="5 fields, or 6 with seconds first; @hourly-style macros; H (a value "
                                      "hashed from the job's name: H 2 * * *, H/15, H(0-29))")
    kinds.add_argument("--every", metavar="DURATION",
                    help="an interval instead of a cron: 90s, 15m, 2h, 1d, 1h30m (ticks from --start-at, else "
                         "the creation time; DST never moves them)")
    kinds.add_argument("--run-at", metavar="ISO",
                    help="one run instead of a cron, then the job is Expired (no offset: in --timezone)")
    ja.add_argument("--timezone", default="UTC", help="IANA zone the cron is read in (default UTC)")
    ja.add_argument("--jitter", metavar="DURATION",
                    help="move every tick by a stable offset of 0 to DURATION (90s, 5m; at most 1d) hashed from "
                         "the job's name, to spread jobs that share a schedule")
    ja.add_argument("--config", "--configuration", dest="configuration", metavar="JSON",
                    help="driver configuration as a JSON object, or @file.json")
    ja.add_argument("--description")
    ja.add_argument("--owner")
    ja.add_argument("--tag", dest="tags", action="append", metavar="TAG",
                    help="a tag of the job (repeat for several; a-z, 0-9, '.', '_', '-')")
    ja.add_argument("--concurrency-mode", type=enum_arg(("Skip", "Queue", "Concurrent")), default="Skip",
                    help="Skip (default), Queue or Concurrent")
    ja.add_argument("--missed-run-policy", type=enum_arg(("Skip", "RunOnce", "RunAll")), default="RunOnce",
                    help="Skip, RunOnce (default) or RunAll")
    ja.add_argument("--max-runtime", type=float, metavar="SECONDS", help="past it the run is timed out")
    ja.add_argument("--max-queued-runs", type=int, metavar="N", help="Queue mode: bound of kept ticks")
    ja.add_argument("--priority", type=int, metavar="N",
                    help="-100 to 100 (default 0): when more is due than the engines have free slots, higher "
                         "starts first; a tick is never behind ticks that fell due 200 minutes after it")
    ja.add_argument("--isolation", type=enum_arg(("thread", "process")), help="thread or process")
    ja.add_argument("--start-at", metavar="ISO", help="nothing runs before (no offset: in --timezone)")
    ja.add_argument("--end-at", metavar="ISO", help="nothing runs from then on (no offset: in --timezone)")
    ja.add_argument("--status", type=enum_arg(JOB_STATUSES), default="Active", help="default Active")
    ja.add_argument("--run-immediately", action="store_true", help="run at once if it never ran")
    ja.add_argument("--notify-on-success", action="store_true")
    ja.add_argument("--notify-on-failure", action=argparse.BooleanOptionalAction, default=True,
                    help="notify when a run fails (default on)")
    ja.add_argument("--notify-to", metavar="ADDRESSES", help="comma-separated e-mail recipients")
    ja.add_argument("--keep-runs-days", type=int, metavar="DAYS",
                    help="keep this job's finished runs this many days (0: regardless of age; default: the engine's)")
    ja.add_argument("--keep-runs-count", type=int, metavar="N",
                    help="keep this job's newest N finished runs (0: no count; default: the engine's)")
    ja.add_argument("--retry", metavar="SPEC",
                    help="retry a Failed or Timeout tick: MAX_ATTEMPTS[,INITIAL_DELAY[,FACTOR[,MAX_DELAY[,JITTER]]]] "
                         "(seconds; e.g. 3 or 5,60,2,3600,0.1); default: the driver's, else none")
    ja.add_argument("--notify-every-attempt", action="store_true",
                    help="notify each failed attempt, not only the final one")
    ja.add_argument("--high-frequency-ok", action=argparse.BooleanOptionalAction, default=False,
                    help="no warning that the job fires more often than every 5 minutes (default off)")
    _add_alert_flags(ja)
    ja.add_argument("--check-import", action="store_true",
                    help="also import a python job's callable here (by default only its form is checked: the "
                         "engines' hosts, not this shell, must be able to import it)")


def _add_jobs_edit(jsub: Any, add: AddVerb) -> None:
    """``jobs edit``: every flag is optional; --clear-* sets a field back to "none of its own"."""
    je = add(jsub, "edit", cmd_jobs_edit, "change fields of a job in place (id and run history kept); "
                                          "a new schedule takes effect from its next tick")
    je.add_argument("job", metavar="JOB")
    je.add_argument("--name")
    je.add_argument("--driver")
    kinds = je.add_mutually_exclusive_group()
    kinds.add_argument("--cron", help="a new schedule: one of --cron, --every, --run-at replaces the job's")
    kinds.add_argument("--every", metavar="DURATION", help="90s, 15m, 2h, 1d, 1h30m")
    kinds.add_argument("--run-at", metavar="ISO", help="one run (no offset: in the job's timezone)")
    je.add_argument("--timezone")
    je.add_argument("--jitter", metavar="DURATION", help="as for jobs add")
    je.add_argument("--clear-jitter", action="store_true", help="no jitter: ticks at the schedule's own times")
    je.add_argument("--config", "--configuration", dest="configuration", metavar="JSON",
                    help="replaces the whole configuration: a JSON object, or @file.json")
    je.add_argument("--description")
    je.add_argument("--owner")
    je.add_argument("--tag", dest="tags", action="append", metavar="TAG",
                    help="the job's tags: the given ones replace the set (repeat for several)")
    je.add_argument("--clear-tags", action="store_true", help="no tags")
    je.add_argument("--status", type=enum_arg(JOB_STATUSES))
    je.add_argument("--concurrency-mode", type=enum_arg(("Skip", "Queue", "Concurrent")))
    je.add_argument("--missed-run-policy", type=enum_arg(("Skip", "RunOnce", "RunAll")))
    je.add_argument("--max-runtime", type=float, metavar="SECONDS")
    je.add_argument("--clear-max-runtime", action="store_true", help="no limit (the driver's default)")
    je.add_argument("--max-queued-runs", type=int, metavar="N")
    je.add_argument("--priority", type=int, metavar="N", help="as for jobs add")
    je.add_argument("--isolation", type=enum_arg(("thread", "process")))
    je.add_argument("--start-at", metavar="ISO")
    je.add_argument("--clear-start-at", action="store_true")
    je.add_argument("--end-at", metavar="ISO")
    je.add_argument("--clear-end-at", action="store_true")
    je.add_argument("--notify-on-success", action=argparse.BooleanOptionalAction, default=None)
    je.add_argument("--notify-on-failure", action=argparse.BooleanOptionalAction, default=None)
    je.add_argument("--notify-to", metavar="ADDRESSES")
    je.add_argument("--keep-runs-days", type=int, metavar="DAYS", help="as for jobs add")
    je.add_argument("--clear-keep-runs-days", action="store_true", help="back to the engine's setting")
    je.add_argument("--keep-runs-count", type=int, metavar="N", help="as for jobs add")
    je.add_argument("--clear-keep-runs-count", action="store_true", help="back to the engine's setting")
    je.add_argument("--retry", metavar="SPEC", help="as for jobs add")
    je.add_argument("--clear-retry", action="store_true", help="no policy of its own (the driver's default)")
    je.add_argument("--notify-final-attempt-only", action=argparse.BooleanOptionalAction, default=None,
                    help="failures notify only when no retry follows (default on)")
    je.add_argument("--high-frequency-ok", action=argparse.BooleanOptionalAction, default=None,
                    help="silence (or, with --no-, restore) the high-frequency warning of the job")
    _add_alert_flags(je, edit=True)
    je.add_argument("--check-import", action="store_true", help="as for jobs add")


def _add_alert_flags(parser: Any, edit: bool = False) -> None:
    """Deadline alerts (docs/guide/operations.md): durations as --every takes them."""
    off = "; 'off' turns it off" if edit else ""
    parser.add_argument("--alert-late-start", metavar="DURATION",
                        help=f"alert when no run started this long after its tick (e.g. 10m){off}")
    parser.add_argument("--alert-silent-after", metavar="DURATION",
                        help=f"alert when no run Completed for this long (e.g. 26h){off}")
    parser.add_argument("--alert-too-long", metavar="DURATION",
                        help=f"alert when a run is Running longer than this (e.g. 2h){off}")
    parser.add_argument("--alert-failing-streak", metavar="N",
                        help=f"alert after N Failed/Timeout runs in a row{off}")
    parser.add_argument("--pause-after-failing-streak", action=argparse.BooleanOptionalAction,
                        default=None, help="pause the job when the failing-streak alert opens")


def _add_jobs_apply(jsub: Any, add: AddVerb) -> None:
    """``jobs apply FILE.toml``: declarative create-or-update by name."""
    jy = add(jsub, "apply", cmd_jobs_apply,
             "create or update the jobs a TOML file declares ([jobs.NAME] tables of create_job's fields), by name; "
             "fields a table leaves out take their defaults, status is kept unless given")
    jy.add_argument("file", metavar="FILE.toml")
    jy.add_argument("--dry-run", action="store_true", help="print what would change (field: old -> new); write nothing")
    jy.add_argument("--remove-missing", choices=("keep", "pause", "delete"), default="keep",
                    help="jobs in the database the file does not declare: keep (default), pause the Active ones, "
                         "or delete them with their history")
    jy.add_argument("--tag", metavar="TAG",
                    help="scope the file to a tag: every job it declares gets the tag, and only jobs carrying "
                         "it count for --remove-missing (one team's file never touches another's jobs)")


def _add_jobs_list(jsub: Any, add: AddVerb) -> None:
    """``jobs list``: Disabled jobs are hidden unless asked for."""
    jl = add(jsub, "list", cmd_jobs_list, "list jobs (Disabled ones only with --all or --status Disabled)")
    jl.add_argument("--all", action="store_true", help="include Disabled jobs")
    jl.add_argument("--status", type=enum_arg(JOB_STATUSES), help="only jobs with this status")
    jl.add_argument("--tag", metavar="TAG", help="only jobs carrying this tag")


def _add_jobs_by_ref(jsub: Any, add: AddVerb) -> None:
    """The job actions whose only argument is the JOB they act on."""
    jp = add(jsub, "pause", cmd_jobs_pause, "pause a job, or with --tag every Active job carrying the tag "
                                            "(status Paused)")
    jp.add_argument("job", metavar="JOB", nargs="?")
    jp.add_argument("--tag", metavar="TAG", help="pause every Active job carrying TAG, in one transaction")
    jp.add_argument("--reason", help="with --tag: why (recorded with the database login and your user@host)")
    jp.add_argument("--until", metavar="TIME",
                    help="with --tag: a maintenance window: an ISO instant (no offset: UTC) or a duration from now "
                         "(90m, 2h, 1d); the first poll after it resumes the jobs")
    jr = add(jsub, "resume", cmd_jobs_resume, "resume a job, or with --tag every Paused job carrying the tag "
                                              "(status Active; next run from now)")
    jr.add_argument("job", metavar="JOB", nargs="?")
    jr.add_argument("--tag", metavar="TAG", help="resume every Paused job carrying TAG")
    for name, handler, text in (("show", cmd_jobs_show, "show every field of a job"),
                                ("remove", cmd_jobs_remove, "delete a job and its run history"),
                                ("delete", cmd_jobs_remove, "the same as remove (the API's delete_job)"),
                                ("unlock", cmd_jobs_unlock, "free a job's lock whoever holds it (operator "
                                                            "override; the holding run ends Abandoned)")):
        add(jsub, name, handler, text).add_argument("job", metavar="JOB")
    jh = add(jsub, "history", cmd_jobs_history, "the job's audit trail: every change, by whom and how, newest "
                                                "first (a deleted job's too)")
    jh.add_argument("job", metavar="JOB")
    jh.add_argument("-n", "--limit", type=int, default=50, help="how many changes (default 50)")


def _add_jobs_why(jsub: Any, add: AddVerb) -> None:
    """``jobs why``: the reasons a tick of a job has not run (or what became of it)."""
    jw = add(jsub, "why", cmd_jobs_why, "why a job did not run: the reasons for its next tick, or for the tick at "
                                        "--at, from the database's state")
    jw.add_argument("job", metavar="JOB")
    jw.add_argument("--at", metavar="TIME", help="explain the job's last tick at or before TIME (ISO 8601; without "
                                                 "an offset, in the job's timezone) instead of its next tick")


def _add_jobs_preview(jsub: Any, add: AddVerb) -> None:
    """``jobs preview``: fire times of a stored job, or of a schedule given as flags."""
    jp = add(jsub, "preview", cmd_jobs_preview, "the next fire times of a job or a cron expression, in its "
                                                "zone and in UTC")
    jp.add_argument("job", metavar="JOB", nargs="?")
    kinds = jp.add_mutually_exclusive_group()
    kinds.add_argument("--cron", help="preview this expression instead of a job's")
    kinds.add_argument("--every", metavar="DURATION", help="preview this interval (anchored at --after, or now)")
    kinds.add_argument("--run-at", metavar="ISO", help="preview this one run (no offset: in --timezone)")
    jp.add_argument("--timezone", help="zone to read --cron in (default UTC, or the job's)")
    jp.add_argument("--name", help="the job name H and --jitter are hashed from (a schedule given as flags)")
    jp.add_argument("--jitter", metavar="DURATION", help="preview with this jitter (needs --name)")
    jp.add_argument("-n", "--count", type=int, default=5, help="how many (default 5)")
    jp.add_argument("--after", metavar="ISO", help="start after this instant (default now)")


def _add_jobs_import_celery(jsub: Any, add: AddVerb) -> None:
    """``jobs import-celery``: one job per beat_schedule entry of a Celery app."""
    ji = add(jsub, "import-celery", cmd_jobs_import_celery,
             "create or update one celery job per beat_schedule entry of a Celery app (by name; exit 1 when "
             "an entry has no faithful cron form: solar, an interval cron cannot express, an unsupported option)")
    ji.add_argument("app", metavar="PKG.MODULE:APP", help="the Celery app, as the engines import it")
    ji.add_argument("--status", type=enum_arg(("Active", "Paused", "Disabled")), default="Active",
                    help="status of new jobs (Paused: switch over from beat without a gap or a double run)")
    ji.add_argument("--mode", type=enum_arg(("send", "wait")), default="send",
                    help="send (default, what beat does) or wait (hold the slot until the task finished)")
    ji.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")


def _add_execute(sub: Any, add: AddVerb) -> None:
    """``execute JOB``: one run now, under the job's lock; --param changes its configuration for that run only."""
    ex = add(sub, "execute", cmd_execute, "run a job now, under its lock, and print the run (exit 1 if it failed)")
    ex.add_argument("job", metavar="JOB")
    ex.add_argument("--force", action="store_true", help="run it even if it is not Active (Paused, Disabled...)")
    ex.add_argument("--param", action="append", metavar="KEY=VALUE",
                    help="merged over the job's configuration for this run only (repeatable; VALUE is JSON when "
                         "it parses, else a string), e.g. --param day=2026-11-30")


def _add_runs(sub: Any, add: AddVerb) -> None:
    """``runs``: the history on its own; ``runs cancel`` and ``runs prune`` as optional actions."""
    rn = add(sub, "runs", cmd_runs, "run history, newest first; `runs show RUN` shows one run, `runs cancel RUN` "
                                    "cancels a Queued or Running run (RUN: the id, its short id as listed, or any "
                                    "unique prefix); `runs prune` deletes old finished runs")
    rn.add_argument("--job", metavar="JOB")
    rn.add_argument("--status", type=enum_arg(RUN_STATUSES), help=", ".join(RUN_STATUSES))
    rn.add_argument("--limit", type=int, default=20, help="default 20")
    rn.add_argument("-f", "--follow", action="store_true",
                    help="keep printing runs as they start and end, until Ctrl-C (--json: one object a line)")
    rn.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="--follow's poll interval")
    rsub = rn.add_subparsers(dest="runs_command", metavar="ACTION", parser_class=Parser, required=False)
    _add_runs_show(rsub, add)
    _add_runs_cancel(rsub, add)
    _add_runs_prune(rsub, add)


RUN_HELP = "the run's id, its short id as `runs` lists it, or any prefix of the id that no other run has"


def _add_runs_show(rsub: Any, add: AddVerb) -> None:
    """``runs show RUN``: one run in full (what `runs` clips)."""
    rs = add(rsub, "show", cmd_runs_show, "one run in full: status, times, parameters, error and details")
    rs.add_argument("run", metavar="RUN", help=RUN_HELP)


def _add_runs_cancel(rsub: Any, add: AddVerb) -> None:
    """``runs cancel RUN_ID``: cancellation is recorded in the database, so it works from any machine."""
    rc = add(rsub, "cancel", cmd_runs_cancel, "cancel a Queued or Running run, from any machine: its engine "
                                             "ends it Cancelled at its next lease renewal")
    rc.add_argument("run", metavar="RUN", help=RUN_HELP)
    rc.add_argument("--wait", action="store_true", help="wait for the run to end; exit 1 unless it ends Cancelled")
    rc.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS", help="--wait's bound (default 120)")


def _add_runs_prune(rsub: Any, add: AddVerb) -> None:
    """``runs prune``: finished runs only, by explicit bounds or else by the retention settings."""
    rp = add(rsub, "prune", cmd_runs_prune, "delete finished runs now, in small batches (never Running or Queued "
                                            "ones); without --older-than/--keep-last: by the retention settings")
    rp.add_argument("--older-than", metavar="DURATION", help="runs that finished longer ago: 30d, 12h, 90m, 2w")
    rp.add_argument("--keep-last", type=int, metavar="N", help="but keep each job's newest N finished runs")
    rp.add_argument("--job", metavar="JOB", help="only this job's runs")
    rp.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    rp.add_argument("--batch-size", type=int, metavar="N", help="rows per batch (default 1000, at most 4000)")


def _add_dashboard(sub: Any, add: AddVerb) -> None:
    """``dashboard``: the web UI served from this process; a bind beyond loopback needs auth."""
    db = add(sub, "dashboard", cmd_dashboard, "serve the web dashboard (needs the 'web' extra); beyond loopback only "
                                              "with MJSCHED_DASHBOARD_TOKEN or MJSCHED_DASHBOARD_USER/PASSWORD")
    db.add_argument("--bind", default="127.0.0.1:8080", metavar="HOST:PORT", help="default 127.0.0.1:8080")
    db.add_argument("--read-only", action="store_true", help="hide and refuse every action")


def _add_demo(sub: Any, add: AddVerb) -> None:
    """``demo``: the zero-setup tour."""
    dm = add(sub, "demo", cmd_demo, "a zero-setup tour: sample jobs, an engine, a live table of runs")
    dm.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long (default: Ctrl-C)")


def _missing_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE
