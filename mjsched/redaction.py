"""One rule for secrets in everything mjsched prints, logs, stores as an outcome or sends.

A value is secret when its key is named like a credential (a word of the key is one of
``password``, ``secret``, ``token``, ... or ends like one: ``apikey``, ``authtoken``; or
the key is a compound ending in ``key``: ``api_key``, ``X-Api-Key``, but not ``key``
alone, which names a setting in mjsched's own output), or when it is the password part of a database URL or connection string
(``postgresql://user:PASSWORD@host``, ``...;PWD=PASSWORD;...``, ``?password=PASSWORD``).
Secrets become ``***``; everything else is left as it was, so the output still says which
host, user and database a job talks to.

The rule errs on the side of hiding: a key such as ``routing_key`` is masked too.
"""
from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"

# Words that make a key secret when a key's word equals one (``db_password``, ``Api-Key``).
SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "token", "tokens",
    "apikey", "credential", "credentials", "auth", "authorization", "cookie",
    "signature", "private",
})
# Endings that make a glued-together key secret (``authtoken``, ``clientsecret``, ``dbpassword``).
SECRET_ENDINGS = ("password", "passwd", "secret", "token", "apikey", "privatekey", "accesskey")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
# scheme://user:password@host -> scheme://user:***@host (the user part has no ':' '/' or '@')
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*:)(?P<secret>\S*?)(?P<tail>@)"
                           r"(?=[^@\s/?#]*(?:[/?#\s]|$))")   # the last '@' before the host: passwords may hold '@'
# key=value pairs in connection strings and query strings: password=..., PWD={...}, ?token=...
_PAIR = re.compile(
    r"(?i)(?P<head>(?<![a-z0-9_])(?:[a-z0-9_]*(?:password|passwd|pwd|secret|token|apikey|api_key))\s*=\s*)"
    r"(?P<secret>'[^']*'|\"[^\"]*\"|\{[^}]*\}|[^;&\s]*)")


def is_secret_key(name: object) -> bool:
    """True when a mapping key is named like a credential."""
    if not isinstance(name, str):
        return False
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if w]
    if len(words) > 1 and words[-1] in ("key", "keys"):
        return True
    return any(w in SECRET_WORDS or w.endswith(SECRET_ENDINGS) for w in words)


def redact_text(text: str) -> str:
    """``text`` with passwords of URLs and ``key=value`` credentials replaced by ``***``."""
    if not text:
        return text
    out = _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["tail"], text)
    return _PAIR.sub(lambda m: m["head"] + MASK if m["secret"] else m[0], out)


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like: dicts, lists, strings, numbers) with every secret masked."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: (MASK if is_secret_key(k) and v not in (None, "") else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in every record a handler emits.

    The CLI puts it on its handler; an application that embeds the engine can do the same:
    ``handler.addFilter(mjsched.redaction.RedactingFilter())``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is the formatter's to report
            return True
        masked = redact_text(message)
        if masked != message:
            record.msg, record.args = masked, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def redact_dsn(dsn: str) -> str:
    """``dsn`` (a URL or key=value string) with any password replaced by ``***``, safe for logs and
    error messages."""
    out = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(?i)((?:password|pwd)\s*=\s*)('[^']*'|\{[^}]*\}|[^;\s]*)", r"\1***", out)
