"""mjsched.cli.config: layers, aliases and typed errors (pure; no database)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mjsched import CompositeNotifier, ConfigurationError, LoggingNotifier, SmtpNotifier, WebhookNotifier
from mjsched.cli.config import KEYS, load


def write(tmp_path: Path, text: str, name: str = "mjsched.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults(tmp_path: Path) -> None:
    s = load({}, env={}, cwd=tmp_path)
    assert s["enabled"] is True and s.dsn is None
    assert s["max_concurrent_jobs"] == 5 and s["lease_timeout"] == 600.0 and s["shutdown_timeout"] == 30.0
    assert all(src == "default" for src in s.sources.values())
    assert s.config_file is None


def test_precedence_flags_env_file_defaults(tmp_path: Path) -> None:
    write(tmp_path, "[scheduled_jobs]\nmax_concurrent_jobs = 2\nlease_timeout = 100\nmax_poll_interval = 3\n")
    env = {"MJSCHED_MAX_CONCURRENT_JOBS": "4", "MJSCHED_LEASE_TIMEOUT": "200"}
    s = load({"max_concurrent_jobs": (9, "--max-concurrent-jobs")}, env=env, cwd=tmp_path)
    assert s["max_concurrent_jobs"] == 9 and s.sources["max_concurrent_jobs"] == "--max-concurrent-jobs"
    assert s["lease_timeout"] == 200.0 and s.sources["lease_timeout"] == "MJSCHED_LEASE_TIMEOUT"
    assert s["max_poll_interval"] == 3.0 and "mjsched.toml" in s.sources["max_poll_interval"]
    assert s["min_poll_interval"] == 0.005 and s.sources["min_poll_interval"] == "default"


def test_explicit_file_and_env_file(tmp_path: Path) -> None:
    other = write(tmp_path, "[scheduled_jobs]\ninstance_name = 'w1'\n", "other.toml")
    assert load({}, config_file=str(other), env={}, cwd=tmp_path)["instance_name"] == "w1"
    assert load({}, env={"MJSCHED_CONFIG": str(other)}, cwd=tmp_path)["instance_name"] == "w1"
    with pytest.raises(ConfigurationError, match="--config"):
        load({}, config_file=str(tmp_path / "nope.toml"), env={}, cwd=tmp_path)


def test_reference_block_camel_case_and_milliseconds(tmp_path: Path) -> None:
    write(tmp_path, "[scheduledJobs]\nenabled = false\nmaxConcurrentJobs = 8\ndefaultLockTimeout = 300000\n"
                    "systemUserEmail = 'system@example.com'\nstaleLockCleanupInterval = 300000\n")
    s = load({}, env={}, cwd=tmp_path)
    assert s["enabled"] is False and s["max_concurrent_jobs"] == 8 and s["lease_timeout"] == 300.0
    assert "defaultLockTimeout" in s.sources["lease_timeout"]
    assert load({}, env={"MJSCHED_DEFAULT_LOCK_TIMEOUT": "1500"}, cwd=tmp_path
                )["lease_timeout"] == 1.5


def test_both_lease_spellings_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "[scheduled_jobs]\nlease_timeout = 10\ndefault_lock_timeout = 10000\n")
    with pytest.raises(ConfigurationError, match="not both"):
        load({}, env={}, cwd=tmp_path)
    with pytest.raises(ConfigurationError, match="not both"):
        load({}, env={"MJSCHED_LEASE_TIMEOUT": "5", "MJSCHED_DEFAULT_LOCK_TIMEOUT": "5000"}, cwd=tmp_path / "none")


@pytest.mark.parametrize("text, field", [
    ("[scheduled_jobs]\nmax_concurent_jobs = 1\n", "max_concurent_jobs"),
    ("[scheduled_jobs]\nmax_concurrent_jobs = 0\n", "scheduled_jobs.max_concurrent_jobs"),
    ("[scheduled_jobs]\nmax_concurrent_jobs = true\n", "scheduled_jobs.max_concurrent_jobs"),
    ("[scheduled_jobs]\nlease_timeout = 'long'\n", "scheduled_jobs.lease_timeout"),
    ("[scheduled_jobs]\nenabled = 'maybe'\n", "scheduled_jobs.enabled"),
    ("[scheduled_jobs]\ndsn = 'mysql://x'\n", "scheduled_jobs.dsn"),
    ("[scheduled_jobs.smtp]\nport = 70000\n", "scheduled_jobs.smtp.port"),
    ("[scheduled_jobs.smtp]\nrecipients = ['not-an-address']\n", "scheduled_jobs.smtp.recipients"),
    ("[scheduled_jobs.webhook]\nurl = 'ftp://x'\n", "scheduled_jobs.webhook.url"),
    ("[scheduled_jobs.metrics]\nport = 'http'\n", "scheduled_jobs.metrics.port"),
    ("[other]\nx = 1\n", "other"),
    ("[scheduled_jobs]\nmin_poll_interval = 5\nmax_poll_interval = 1\n", "min_poll_interval"),
])
def test_bad_file_values_name_the_key(tmp_path: Path, text: str, field: str) -> None:
    write(tmp_path, text)
    with pytest.raises(ConfigurationError) as info:
        load({}, env={}, cwd=tmp_path)
    assert field in info.value.field


def test_unknown_key_suggests_the_right_one(tmp_path: Path) -> None:
    write(tmp_path, "[scheduled_jobs]\nmax_concurent_jobs = 1\n")
    with pytest.raises(ConfigurationError, match="did you mean 'max_concurrent_jobs'"):
        load({}, env={}, cwd=tmp_path)


@pytest.mark.parametrize("name, value", [("MJSCHED_MAX_CONCURRENT_JOBS", "lots"), ("MJSCHED_LEASE_TIMEOUT", "0"),
                                         ("MJSCHED_ENABLED", "perhaps"), ("MJSCHED_METRICS_PORT", "0"),
                                         ("MJSCHED_SHUTDOWN_TIMEOUT", "-3")])
def test_bad_env_values_name_the_variable(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load({}, env={name: value}, cwd=tmp_path)
    assert info.value.field == name


def test_env_booleans(tmp_path: Path) -> None:
    for text, expected in (("1", True), ("yes", True), ("ON", True), ("0", False), ("no", False), ("off", False)):
        assert load({}, env={"MJSCHED_ENABLED": text}, cwd=tmp_path)["enabled"] is expected


def test_unknown_env_variable_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    load({}, env={"MJSCHED_MAX_CONCURENT_JOBS": "3"}, cwd=tmp_path)
    assert "MJSCHED_MAX_CONCURRENT_JOBS" in caplog.text


def test_every_key_has_an_env_variable() -> None:
    assert KEYS["smtp.host"].env == "MJSCHED_SMTP_HOST"
    assert KEYS["embedded.data_dir"].env == "MJSCHED_EMBEDDED_DATA_DIR"
    assert len({k.env for k in KEYS.values()}) == len(KEYS)


def test_notifier_building(tmp_path: Path) -> None:
    assert isinstance(load({}, env={}, cwd=tmp_path).build_notifier(), LoggingNotifier)
    smtp = load({}, env={"MJSCHED_SMTP_HOST": "smtp.local", "MJSCHED_SMTP_SENDER": "mj@example.com",
                         "MJSCHED_SMTP_RECIPIENTS": "a@example.com, b@example.com", "MJSCHED_NOTIFY_LOG": "0"},
                cwd=tmp_path).build_notifier()
    assert isinstance(smtp, SmtpNotifier) and smtp.recipients == ["a@example.com", "b@example.com"]
    both = load({}, env={"MJSCHED_SMTP_HOST": "smtp.local", "MJSCHED_SMTP_SENDER": "mj@example.com",
                         "MJSCHED_WEBHOOK_URL": "https://hooks.example.com/x"}, cwd=tmp_path).build_notifier()
    assert isinstance(both, CompositeNotifier)
    assert [type(n) for n in both.notifiers] == [LoggingNotifier, SmtpNotifier, WebhookNotifier]


def test_notifier_errors_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        load({}, env={"MJSCHED_SMTP_HOST": "smtp.local"}, cwd=tmp_path).build_notifier()
    assert info.value.field == "smtp.sender"
    with pytest.raises(ConfigurationError) as info:
        load({}, env={"MJSCHED_SMTP_SENDER": "mj@example.com"}, cwd=tmp_path).build_notifier()
    assert info.value.field == "smtp.host"
    write(tmp_path, "[scheduled_jobs.smtp]\nhost = 'smtp'\nsender = 'x@y.z'\nusername = 'u'\n")
    with pytest.raises(ConfigurationError) as info:
        load({}, env={}, cwd=tmp_path).build_notifier()
    assert "smtp.username" in info.value.field and "mjsched.toml" in info.value.field


def test_describe_hides_secrets(tmp_path: Path) -> None:
    s = load({}, env={"MJSCHED_DSN": "postgresql://u:pw123@h/db", "MJSCHED_SMTP_PASSWORD": "pw456"}, cwd=tmp_path)
    text = repr(s.describe())
    assert "pw123" not in text and "pw456" not in text and "postgresql://u:***@h/db" in text


def test_engine_options(tmp_path: Path) -> None:
    s = load({"lease_timeout": (30.0, "--lease")}, env={"MJSCHED_INSTANCE_NAME": "w7"}, cwd=tmp_path)
    options = s.engine_options()      # the engine's own EngineOptions, validated there
    assert options.lease_timeout == 30.0 and options.instance_name == "w7"
    assert options.max_concurrent_jobs == 5 and isinstance(s.build_notifier(), LoggingNotifier)


def test_a_settings_file_that_is_not_toml_is_named_with_its_line_and_column(tmp_path: Path) -> None:
    """Issue 35 item 10: the error read '<path>=None: is not valid TOML: ...'."""
    path = write(tmp_path, "[scheduled_jobs]\nmax_concurrent_jobs = 3\npoll = [1, 2\n")
    with pytest.raises(ConfigurationError) as caught:
        load(config_file=str(path), env={})
    assert str(caught.value) == f"{path} is not valid TOML: line 4, column 1: Unclosed array"
    assert (caught.value.line, caught.value.column) == (4, 1)
