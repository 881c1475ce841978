"""Settings for the ``mjsched`` command: flags > ``MJSCHED_*`` environment > TOML file > defaults.

The TOML file is ``--config PATH``, else ``$MJSCHED_CONFIG``, else ``./mjsched.toml``
when it exists. Its ``[scheduled_jobs]`` table mirrors the reference's
``scheduledJobs`` block; the reference's camelCase spelling (``[scheduledJobs]``,
``maxConcurrentJobs``, ``defaultLockTimeout`` in milliseconds) is accepted too::

    [scheduled_jobs]
    enabled = true
    dsn = "postgresql://mjsched@db.internal/app"
    max_concurrent_jobs = 5
    lease_timeout = 600            # seconds (or default_lock_timeout = 600000, in ms)
    min_poll_interval = 0.005
    max_poll_interval = 10
    instance_name = "worker-1"
    shutdown_timeout = 30          # bounded drain on SIGINT/SIGTERM
    default_max_runtime = 86400    # seconds a run of a job without max_runtime may take ("off": unbounded)
    keep_runs_days = 30            # run-history retention (a job's own keep_runs_days wins)
    keep_runs_count = 100          # ... and each job's newest 100 finished runs are kept
    purge_interval = 10            # seconds between two purge passes of an engine (x2, x4, x8 while none deletes)
    allowed_drivers = ["http", "python"]   # refuse (Failed run) jobs of other drivers; unset: all
    celery_allowed_apps = ["proj.celery:app"]           # celery jobs: app paths it may import
    celery_allowed_brokers = ["redis://broker.internal:6379"]   # ... and broker URLs they may name

    [scheduled_jobs.smtp]          # e-mail notifications (optional)
    host = "smtp.internal"
    port = 587
    sender = "mjsched@example.com"
    recipients = ["ops@example.com"]
    starttls = true

    [scheduled_jobs.webhook]       # HTTP notifications (optional)
    url = "https://hooks.example.com/mjsched"

    [scheduled_jobs.metrics]
    port = 9464
    host = "127.0.0.1"

    [scheduled_jobs.embedded]      # the zero-setup PostgreSQL
    data_dir = "/srv/mjsched"
    user = "mjsched"

Every key has an environment variable: ``MJSCHED_`` + the key in upper case, with
the sub-table as a prefix (``MJSCHED_SMTP_HOST``, ``MJSCHED_METRICS_PORT``,
``MJSCHED_EMBEDDED_DATA_DIR``). Every value is checked; an error names the key
*where it came from* (``MJSCHED_MAX_CONCURRENT_JOBS``, ``--lease``,
``scheduled_jobs.lease_timeout in ./mjsched.toml``).
"""
from __future__ import annotations

import difflib
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import retention, validation
from ..redaction import redact_dsn as redact
from ..engine.options import DEFAULT_MAX_RUNTIME, MAX_RUNTIME_LIMIT, EngineOptions
from ..errors import ConfigurationError
from . import tomlfile
from ..notify import CompositeNotifier, LoggingNotifier, Notifier, SmtpNotifier, WebhookNotifier, split_addresses

log = logging.getLogger(__name__)

ENV_PREFIX = "MJSCHED_"
DEFAULT_FILE = "mjsched.toml"
TABLE = "scheduled_jobs"
TABLE_ALIASES = ("scheduled_jobs", "scheduledJobs", "mjsched")
# Reference keys that mean nothing here (the reference itself ignores the second one).
IGNORED_KEYS = {"system_user_email", "stale_lock_cleanup_interval"}
# Environment variables that belong to the test suite or to this module itself.
OTHER_ENV = {"MJSCHED_CONFIG", "MJSCHED_TEST_POSTGRES_DSN", "MJSCHED_TEST_MSSQL_DSN", "MJSCHED_REQUIRE_POSTGRES",
             "MJSCHED_PG_BIN", "MJSCHED_DEFAULT_LOCK_TIMEOUT"}


# -- value checks: each takes (label, value) and returns the normalised value -------------------------
def _bool(label: str, value: Any) -> bool:
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        raise ConfigurationError(label, value, "must be true or false (1/0, yes/no, on/off)")
    return validation.flag(label, value)


def _int(maximum: int) -> Callable[[str, Any], int]:
    def check(label: str, value: Any) -> int:
        raw = value
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigurationError(label, value, "must be an integer") from None
        try:
            return validation.positive_int(label, value, maximum=maximum)
        except ConfigurationError as exc:
            raise ConfigurationError(label, raw, exc.reason) from None
    return check


def _seconds(maximum: float = 31_536_000) -> Callable[[str, Any], float]:
    def check(label: str, value: Any) -> float:
        raw = value
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ConfigurationError(label, value, "must be a number of seconds") from None
        try:
            return float(validation.positive_number(label, value, optional=False, maximum=maximum) or 0)
        except ConfigurationError as exc:
            raise ConfigurationError(label, raw, exc.reason) from None
    return check


def _bound_or_off(label: str, value: Any) -> float | None:
    """A bound in seconds, or off: 0, "none" or "off" (TOML has no null)."""
    if isinstance(value, str) and value.strip().lower() in ("none", "off", "0"):
        return None
    if not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0:
        return None
    return _seconds(MAX_RUNTIME_LIMIT)(label, value)


def _keep(check: Callable[[str, Any], int | None]) -> Callable[[str, Any], int | None]:
    """A retention setting: a whole number (text from the environment is converted), 0 for off."""
    def convert(label: str, value: Any) -> int | None:
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigurationError(label, value, "must be a whole number") from None
        return check(label, value)
    return convert


def _port(label: str, value: Any) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigurationError(label, value, "must be a TCP port number (1-65535)") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ConfigurationError(label, value, "must be a TCP port number (1-65535)")
    return value


def _text(limit: int = 1000) -> Callable[[str, Any], str | None]:
    def check(label: str, value: Any) -> str | None:
        out = validation.text(label, value, limit=limit)
        return out if out and out.strip() else None
    return check


def _dsn(label: str, value: Any) -> str | None:
    out = validation.text(label, None if value is None else value, limit=4000)
    if out is None or not out.strip():
        return None
    low = out.strip().lower()
    if not (low.startswith(("postgresql://", "postgres://", "mssql://")) or "=" in low):
        raise ConfigurationError(label, redact(out), "must be a database URL: postgresql://... or mssql://...")
    return out.strip()


def _addresses(label: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        out = split_addresses(value)
        for addr in out:
            if "@" not in addr:
                raise ConfigurationError(label, addr, "is not an e-mail address")
        return out or None
    raise ConfigurationError(label, value, "must be a list of e-mail addresses or a comma-separated string")


def _headers(label: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    raise ConfigurationError(label, value, "must be a table of string to string")


def _url(label: str, value: Any) -> str | None:
    out = _text(4000)(label, value)
    if out is not None and not re.match(r"^https?://[^/\s]+", out):
        raise ConfigurationError(label, out, "must be an http:// or https:// URL")
    return out


def _drivers(label: str, value: Any) -> list[str] | None:
    """A list of registered driver names, or a comma-separated string of them; unset: all."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from ..drivers.registry import allowed_driver_names

    if not isinstance(value, (str, list)):
        raise ConfigurationError(label, value, "must be a list of driver names or a comma-separated string")
    names = allowed_driver_names(value, field=label)
    return sorted(names) if names is not None else None


def _celery_apps(label: str, value: Any) -> list[str] | None:
    """App paths a celery job may name ('pkg.module:app'), a list or a comma-separated string;
    unset: any; an empty list: none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from ..drivers.celery_trust import allowed_apps

    if not isinstance(value, (str, list)):
        raise ConfigurationError(label, value, "must be a list of app paths or a comma-separated string")
    apps = allowed_apps(value, field=label)
    return sorted(apps) if apps is not None else None


def _celery_brokers(label: str, value: Any) -> list[str] | None:
    """Broker / result backend URLs a celery job may name, kept without their credentials;
    unset: any; an empty list: none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from ..drivers.celery_trust import allowed_brokers

    if not isinstance(value, (str, list)):
        raise ConfigurationError(label, value, "must be a list of URLs or a comma-separated string")
    places = allowed_brokers(value, field=label)
    return [str(p) for p in places] if places is not None else None


def _host(label: str, value: Any) -> str:
    out = _text(255)(label, value)
    if out is None:
        raise ConfigurationError(label, value, "must be a host name or address")
    return out


@dataclass(frozen=True)
class Key:
    name: str                      # flat key: "max_concurrent_jobs", "smtp.host"
    check: Callable[[str, Any], Any]
    default: Any
    doc: str
    secret: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.replace(".", "_").upper()


KEYS: dict[str, Key] = {k.name: k for k in (
    Key("enabled", _bool, True, "false: `mjsched run` exits at once without polling"),
    Key("dsn", _dsn, None, "database URL; unset: the embedded PostgreSQL", secret=True),
    Key("max_concurrent_jobs", _int(10_000), 5, "hard cap on runs executing in one engine"),
    Key("lease_timeout", _seconds(), 600.0, "seconds a claimed run stays ours without a heartbeat "
                                           "(alias default_lock_timeout, in milliseconds)"),
    Key("min_poll_interval", _seconds(3600), 0.005, "shortest sleep between two polls (seconds)"),
    Key("max_poll_interval", _seconds(3600), 10.0, "longest sleep between two polls (seconds)"),
    Key("instance_name", _text(255), None, "engine name in run rows and `mjsched status`; default host-pid"),
    Key("allowed_drivers", _drivers, None, "drivers this engine may run, e.g. [\"http\", \"python\"]; a job of "
                                           "another driver ends Failed on it (unset: every registered driver)"),
    Key("celery_allowed_apps", _celery_apps, None, "app paths ('pkg.module:app') a celery job may name here; "
                                                   "others end Failed, never imported (unset: any)"),
    Key("celery_allowed_brokers", _celery_brokers, None, "broker / result backend URLs a celery job may name "
                                                         "(credentials ignored; no path: any db or vhost there; "
                                                         "unset: any)"),
    Key("shutdown_timeout", _seconds(86_400), 30.0, "on SIGINT/SIGTERM, wait at most this long for running jobs"),
    Key("cancel_grace", _seconds(86_400), 30.0, "seconds a run cancelled by `mjsched runs cancel` has to stop "
                                                "before its process is killed"),
    Key("default_max_runtime", _bound_or_off, DEFAULT_MAX_RUNTIME, "seconds a run may execute when its job sets no "
                                                        "max_runtime (0, \"none\" or \"off\": unbounded)"),
    Key("keep_runs_days", _keep(retention.keep_days), None, "run-history retention: keep finished runs this many "
                                                            "days (a job's keep_runs_days wins; unset or 0: off)"),
    Key("keep_runs_count", _keep(retention.keep_count), None, "run-history retention: keep each job's newest N "
                                                              "finished runs (a job's keep_runs_count wins)"),
    Key("purge_interval", _seconds(86_400), 10.0, "an engine purges run history at most this often (seconds); "
                                                  "up to 8x as seldom while its sweeps find nothing"),
    Key("alert_interval", _seconds(3_600), 15.0, "an engine evaluates deadline alerts at most this often (seconds)"),
    Key("notify_log", _bool, True, "log every notification (besides e-mail/webhook)"),
    Key("smtp.host", _text(255), None, "SMTP server; set it to send e-mail notifications"),
    Key("smtp.port", _port, 25, "SMTP port"),
    Key("smtp.sender", _text(320), None, "From address (required with smtp.host)"),
    Key("smtp.recipients", _addresses, None, "To addresses; unset: each job's notify_to"),
    Key("smtp.username", _text(320), None, "SMTP AUTH user"),
    Key("smtp.password", _text(1000), None, "SMTP AUTH password", secret=True),
    Key("smtp.starttls", _bool, False, "upgrade the SMTP connection with STARTTLS"),
    Key("smtp.timeout", _seconds(600), 10.0, "SMTP timeout (seconds)"),
    Key("webhook.url", _url, None, "POST each notification as JSON to this URL", secret=True),
    Key("webhook.headers", _headers, None, "extra HTTP headers (TOML only)", secret=True),
    Key("webhook.timeout", _seconds(600), 10.0, "webhook timeout (seconds)"),
    Key("metrics.port", _port, None, "serve Prometheus metrics on this port during `mjsched run`"),
    Key("metrics.host", _host, "127.0.0.1", "address the metrics endpoint binds to"),
    Key("embedded.data_dir", _text(4000), None, "home of the embedded PostgreSQL "
                                                "(default ~/.local/share/mjsched; as root /var/lib/mjsched)"),
    Key("embedded.user", _text(64), None, "as root: the unprivileged user that runs it (default mjsched)"),
)}
LEASE_ALIAS = "default_lock_timeout"   # the reference's name, in milliseconds


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@dataclass
class Settings:
    """Effective settings; ``sources`` says where each value came from."""

    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    config_file: Path | None = None

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def dsn(self) -> str | None:
        return self.values["dsn"]

    def label(self, key: str) -> str:
        return self.sources.get(key, "default")

    # -- building things -------------------------------------------------------------------------
    def build_notifier(self) -> Notifier:
        """The notifier these settings describe: logging, plus e-mail and/or webhook when set."""
        parts: list[Notifier] = []
        if self.values["notify_log"]:
            parts.append(LoggingNotifier())
        if self.values["smtp.host"]:
            parts.append(self._wrap("smtp", lambda: SmtpNotifier(
                host=self.values["smtp.host"], port=self.values["smtp.port"], sender=self.values["smtp.sender"],
                recipients=self.values["smtp.recipients"], username=self.values["smtp.username"],
                password=self.values["smtp.password"], starttls=self.values["smtp.starttls"],
                timeout=self.values["smtp.timeout"])))
        elif any(self.values[k] for k in ("smtp.sender", "smtp.recipients", "smtp.username")):
            raise ConfigurationError(self._where("smtp.host"), None,
                                     "is required when other smtp settings are given")
        if self.values["webhook.url"]:
            parts.append(self._wrap("webhook", lambda: WebhookNotifier(
                self.values["webhook.url"], headers=self.values["webhook.headers"],
                timeout=self.values["webhook.timeout"])))
        if not parts:
            return CompositeNotifier()
        return parts[0] if len(parts) == 1 else CompositeNotifier(*parts)

    def _wrap(self, table: str, make: Callable[[], Notifier]) -> Notifier:
        try:
            return make()
        except ConfigurationError as exc:
            key = f"{table}.{exc.field}"
            raise ConfigurationError(self._where(key), exc.value, exc.reason) from None

    def _where(self, key: str) -> str:
        source = self.sources.get(key)
        return source if source and source != "default" else key

    def engine_options(self) -> EngineOptions:
        """The engine's tuning from these settings, validated by EngineOptions itself (the
        rules are written there once); an error names the flag, variable or file key it came from."""
        try:
            return EngineOptions(max_concurrent_jobs=self.values["max_concurrent_jobs"],
                                 lease_timeout=self.values["lease_timeout"],
                                 instance_name=self.values["instance_name"],
                                 min_poll_interval=self.values["min_poll_interval"],
                                 max_poll_interval=self.values["max_poll_interval"],
                                 allowed_drivers=self.values["allowed_drivers"],
                                 celery_allowed_apps=self.values["celery_allowed_apps"],
                                 celery_allowed_brokers=self.values["celery_allowed_brokers"],
                                 cancel_grace=self.values["cancel_grace"],
                                 default_max_runtime=self.values["default_max_runtime"],
                                 keep_runs_days=self.values["keep_runs_days"],
                                 keep_runs_count=self.values["keep_runs_count"],
                                 purge_interval=self.values["purge_interval"],
                                 alert_interval=self.values["alert_interval"])
        except ConfigurationError as exc:
            raise ConfigurationError(self._where(exc.field), exc.value, exc.reason) from None

    def describe(self) -> list[dict[str, Any]]:
        """Every key, its effective value (secrets hidden) and where it came from."""
        out = []
        for name, key in KEYS.items():
            value = self.values[name]
            if key.secret and value is not None:
                value = redact(value) if name == "dsn" else "***"
            out.append({"key": name, "value": value, "source": self.label(name), "env": key.env,
                        "doc": key.doc})
        return out


def find_config_file(explicit: str | None, env: Mapping[str, str], cwd: Path | None = None) -> Path | None:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigurationError("--config", explicit, "no such file")
        return path
    if env.get("MJSCHED_CONFIG"):
        path = Path(env["MJSCHED_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigurationError("MJSCHED_CONFIG", env["MJSCHED_CONFIG"], "no such file")
        return path
    local = (cwd or Path.cwd()) / DEFAULT_FILE
    return local if local.is_file() else None


def read_file(path: Path) -> dict[str, tuple[Any, str]]:
    """Flat key -> (value, label) from a TOML file; unknown keys are errors."""
    doc = tomlfile.read(path)
    tables = [name for name in TABLE_ALIASES if name in doc]
    stray = [name for name in doc if name not in TABLE_ALIASES]
    if stray:
        raise ConfigurationError(f"{stray[0]} in {path}", doc[stray[0]],
                                 f"unknown table or key; put settings under [{TABLE}]")
    if len(tables) > 1:
        raise ConfigurationError(f"[{tables[1]}] in {path}", None, f"give only one of [{'], ['.join(tables)}]")
    if not tables:
        return {}
    table_name = tables[0]
    body = doc[table_name]
    if not isinstance(body, dict):
        raise ConfigurationError(f"{table_name} in {path}", body, "must be a table")
    out: dict[str, tuple[Any, str]] = {}

    def walk(prefix: str, table: dict[str, Any]) -> None:
        for raw, value in table.items():
            key = prefix + _snake(raw)
            label = f"{table_name}.{prefix}{raw} in {path}"
            if isinstance(value, dict) and key in ("smtp", "webhook", "metrics", "embedded"):
                walk(key + ".", value)
                continue
            if key in IGNORED_KEYS:
                log.debug("ignoring reference key %s", label)
                continue
            if key == LEASE_ALIAS:
                if "lease_timeout" in out:
                    raise ConfigurationError(label, value, "give lease_timeout or default_lock_timeout, not both")
                out["lease_timeout"] = (_lease_from_ms(label, value), label)
                continue
            if key not in KEYS:
                raise ConfigurationError(label, value, "unknown setting" + _suggest(key))
            if key == "lease_timeout" and "lease_timeout" in out:
                raise ConfigurationError(label, value, "give lease_timeout or default_lock_timeout, not both")
            out[key] = (value, label)
    walk("", body)
    return out


def _lease_from_ms(label: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ConfigurationError(label, value, "must be a number of milliseconds") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
        raise ConfigurationError(label, value, "must be a positive number of milliseconds")
    return float(value) / 1000.0


def _suggest(key: str) -> str:
    close = difflib.get_close_matches(key, [*KEYS, LEASE_ALIAS], n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(KEYS)}"


def read_env(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    by_env = {k.env: k.name for k in KEYS.values()}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        if name in by_env:
            out[by_env[name]] = (value, name)
        elif name not in OTHER_ENV and not name.startswith("MJSCHED_TEST_"):
            close = difflib.get_close_matches(name, [*by_env, "MJSCHED_DEFAULT_LOCK_TIMEOUT"], n=1)
            log.warning("ignoring unknown environment variable %s%s", name,
                        f" (did you mean {close[0]}?)" if close else "")
    if "MJSCHED_DEFAULT_LOCK_TIMEOUT" in env:
        if "lease_timeout" in out:
            raise ConfigurationError("MJSCHED_DEFAULT_LOCK_TIMEOUT", env["MJSCHED_DEFAULT_LOCK_TIMEOUT"],
                                     "give MJSCHED_LEASE_TIMEOUT or MJSCHED_DEFAULT_LOCK_TIMEOUT, not both")
        out["lease_timeout"] = (_lease_from_ms("MJSCHED_DEFAULT_LOCK_TIMEOUT", env["MJSCHED_DEFAULT_LOCK_TIMEOUT"]),
                                "MJSCHED_DEFAULT_LOCK_TIMEOUT")
    return out


def load(flags: Mapping[str, tuple[Any, str]] | None = None, *, config_file: str | None = None,
         env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """Merge the layers. ``flags`` maps a key to (value, "--flag") for flags the user gave."""
    env = os.environ if env is None else env
    path = find_config_file(config_file, env, cwd)
    layers = [read_file(path) if path else {}, read_env(env), dict(flags or {})]
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, key in KEYS.items():
        raw, label = key.default, "default"
        for layer in layers:
            if name in layer:
                raw, label = layer[name]
        values[name] = raw if label == "default" else key.check(label, raw)
        sources[name] = label
    settings = Settings(values, sources, path)
    settings.engine_options()   # the engine's own rules across keys (min <= max poll, ...), named by source
    return settings
