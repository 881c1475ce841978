"""One rule for secrets in everything mjsched prints, logs, stores as an outcome or sends.

A key is secret (:func:`is_secret_key`) when one of its words is a credential word
(``password``, ``secret``, ``token``, ``auth``, ``sig``, ...) or ends like one
(``authtoken``, ``clientsecret``), or when it is a compound ending in ``key`` (``api_key``,
``X-Api-Key``, ``AWS_SECRET_ACCESS_KEY``), unless its last word says it describes a secret
rather than holds one (``token_type``, ``password_file``, ``secret_name``, ``auth_url``).
``key`` alone names a setting in mjsched's own output and is secret only as a URL's query
parameter (``?key=...``, an API key there).

The same test decides for a mapping's keys (:func:`redact`) and for every key written in
text (:func:`redact_text`): ``key=value``, ``key: value``, ``'key': 'value'``,
``"key": "value"``, ``Header: value`` (``Authorization: Bearer ***`` keeps its scheme),
``--key=value``, ``--key value``, ``?key=value&...``. Text also loses the password of a
URL (``scheme://user:***@host``), the body of a PEM private key, the value of a client's
password flag (``mysql -p***``, ``sshpass -p ***``, ``redis-cli -a ***``,
``curl -u user:***``) and tokens recognisable by their shape (AWS access key ids, GitHub,
GitLab, Slack, Stripe and Google keys, JWTs, ``Bearer ...``). Finally a job's own secrets
(:func:`secret_values` of its configuration) are masked wherever they reappear in its
run's output, error or notification (:func:`mask_values`).

Secrets become ``***``; everything else is left as it was, so the output still says which
host, user and database a job talks to. The rule errs on the side of hiding: a key such as
``routing_key`` is masked too.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Callable, Iterable, Optional
from urllib.parse import quote

MASK = "***"
MIN_KNOWN_SECRET = 4      # a job's secret values shorter than this are not searched for in its output

# A key is secret when one of its words is one of these (``db_password``, ``Api-Key``, ``sig``)...
SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets", "token", "tokens",
    "apikey", "credential", "credentials", "auth", "authorization", "cookie", "signature", "sig",
    "private", "jwt",
})
# ... or ends like one (``authtoken``, ``clientsecret``, ``dbpassword``)...
SECRET_ENDINGS = ("password", "passwd", "secret", "token", "apikey", "privatekey", "accesskey")
# ... unless its last word says it describes the secret rather than holds it (``token_type``).
DESCRIBING_WORDS = frozenset({
    "type", "count", "length", "len", "size", "ttl", "expiry", "expires", "file", "path", "name",
    "url", "uri", "endpoint", "enabled", "required",
})
QUERY_ONLY_KEYS = frozenset({"key"})   # secret as a URL query parameter only (?key=AIza...)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")

# -- the forms of text ------------------------------------------------------------------------
# scheme://user:password@host -> scheme://user:***@host (the user part has no ':' '/' or '@');
# the last '@' before the host ends the password, which may itself hold '@'.
# Each part is bounded (256), so a text of many "x://y:" costs linear time, not quadratic.
_URL_PASSWORD = re.compile(r"(?P<head>(?<![a-zA-Z0-9+.\-])[a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^:/@\s'\"]{0,256}:)"
                           r"(?P<secret>[^\s'\"]{0,256}?)(?P<tail>@)(?=[^@\s/?#'\"]{0,256}(?:[/?#\s'\"]|$))")
# A PEM private key, possibly cut short at either end (a tail of output keeps its last lines).
# Line breaks may be real or escaped (``\\n`` in JSON text); they are kept around the mask.
_BREAK = r"(?:\s|\\r|\\n)"
_PEM = re.compile(rf"(?P<begin>-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----)(?P<lead>{_BREAK}*)"
                  rf"(?P<secret>.*?)(?P<trail>{_BREAK}*)(?P<end>-----END (?P=label)-----|\Z)", re.S)
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_LINE_BREAK = re.compile(r"(\r?\n|(?:\\r)?\\n)")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_AUTH_SCHEMES = r"(?:Bearer|Basic|Token|Digest|Negotiate|NTLM|Bot|ApiKey|OAuth|AWS4-HMAC-SHA256)"
# key <sep> value: the key maybe quoted (also as \" inside a JSON string); then, only for a
# secret key, the value: quoted, braced (ODBC), bracketed, a header's "Scheme credentials", or
# bare up to a separator. Matching the value only after the key is known secret keeps it linear.
_KEY_SEP = re.compile(r"""
    (?<![\w.\-\\])
    (?P<open>\\*["']|)
    (?P<key>-{0,2}[A-Za-z_][\w.\-]{0,100})
    (?P=open)
    (?P<sep>[ \t]*(?:=>|:=|=|:)[ \t]*)
""", re.X)
_VALUE = re.compile(r"""
        (?P<q1>\\+")(?:(?!(?P=q1))[^\n])*(?:(?P=q1)|$)
      | (?P<q2>")(?:[^"\\\n]|\\.)*(?:"|$)
      | (?P<q3>')(?:[^'\\\n]|\\.)*(?:'|$)
      | (?P<q4>\{)[^}\n]*(?:\}|$)
      | (?P<q5>\[)[^\]\n]*(?:\]|$)
      | (?P<scheme>""" + _AUTH_SCHEMES + r"""[ \t]+)?(?:[^\s;&,'"<>]|,(?=\S))+
""", re.X | re.M)
_QUOTES = ("q1", "q2", "q3")       # a quoted value keeps its quotes: "password": "***"
# --password VALUE (a long option whose name is a secret key, its value the next word)
_LONG_OPTION = re.compile(r"(?<![\w\-])(?P<flag>--[A-Za-z][\w\-]*)(?P<sep>[ \t]+)(?P<secret>[^\s\-'\"][^\s'\"]*)")
# Tokens that say what they are by their shape.
_SHAPED = re.compile(r"""
    \b(?:AKIA|ASIA)[0-9A-Z]{16}\b
  | \bgh[pousr]_[A-Za-z0-9]{30,}\b | \bgithub_pat_[A-Za-z0-9_]{22,}\b | \bglpat-[A-Za-z0-9_\-]{20,}
  | \bxox[abposr]-[A-Za-z0-9\-]{10,} | \b[sr]k_(?:live|test)_[0-9A-Za-z]{16,}\b | \bAIza[0-9A-Za-z_\-]{35}
  | \beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*
""", re.X)
_BEARER = re.compile(r"(?P<head>(?i:\bbearer)[ \t]+)(?P<secret>(?=[\w\-.~+/]*[0-9\-.~+/])[\w\-.~+/]{8,}=*)")


class _ClientFlag:
    """A client's password flag: ``program`` names the client; the secret is glued to ``flag``
    (``-pSECRET``), the next word (``-a SECRET``) or the part after ``user:``."""

    def __init__(self, program: str, flag: str, *, glued: bool, separate: bool, userinfo: bool = False) -> None:
        self.program = re.compile(rf"(?<![\w\-])(?:{program})(?![\w\-])")
        self.flag, self.glued, self.separate, self.userinfo = flag, glued, separate, userinfo
        space = "[ \t]*" if glued and separate else ("" if glued else "[ \t]+")
        user = r"[^\s:'\"]*:" if userinfo else ""
        self.pattern = re.compile(rf"(?<=[\s'\"\[,])(?P<head>{re.escape(flag)}{space}{user})(?P<secret>[^\s'\",\]]+)")

    def argv(self, args: list[str], i: int) -> tuple[int, str, str] | None:
        """(index, masked argument, secret) when ``args[i]`` is this flag with its secret, else None."""
        arg = args[i]
        if arg == self.flag and self.separate and i + 1 < len(args):
            target, head, value = i + 1, "", args[i + 1]
        elif arg.startswith(self.flag) and len(arg) > len(self.flag) and self.glued:
            target, head, value = i, self.flag, arg[len(self.flag):]
        else:
            return None
        if self.userinfo:
            user, sep, value = value.partition(":")
            head += user + sep
            if not sep:
                return None
        return (target, head + MASK, value) if value else None


_CLIENT_FLAGS = (
    _ClientFlag(r"mysql\w*|mariadb[\w\-]*", "-p", glued=True, separate=False),   # mysql -p SECRET prompts
    _ClientFlag("sshpass", "-p", glued=True, separate=True),
    _ClientFlag("redis-cli", "-a", glued=False, separate=True),
    _ClientFlag("curl", "-u", glued=True, separate=True, userinfo=True),
    _ClientFlag("curl", "--user", glued=False, separate=True, userinfo=True),
)

# Cheap tests first: a text with none of these holds no secret key, and no client's flag.
_KEY_HINT = re.compile(r"(?i)pass|pwd|secret|token|key|auth|cookie|sig|private|jwt|credential")
_CLIENT_HINT = re.compile(r"mysql|mariadb|sshpass|redis-cli|curl")

_Found = Optional[list]


def is_secret_key(name: object) -> bool:
    """True when a mapping key (or a key written in text) is named like a credential."""
    if not isinstance(name, str):
        return False
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if w]
    if not words or (len(words) > 1 and words[-1] in DESCRIBING_WORDS):
        return False
    if len(words) > 1 and words[-1] in ("key", "keys"):
        return True
    return any(w in SECRET_WORDS or w.endswith(SECRET_ENDINGS) for w in words)


def _hide(secret: str, found: _Found) -> str:
    if found is not None and secret and secret != MASK:
        found.append(secret)
    return MASK


def _pair(key: re.Match[str], found: _Found) -> tuple[str, int] | None:
    """(the masked value, where it ends) when ``key`` (a _KEY_SEP match) names a secret; else None."""
    before = key.string[key.start() - 1] if key.start() else ""
    if key["sep"] == ":" and "." in key["key"] and not key["open"]:
        return None                                     # pkg.secrets:main names a function, not a pair
    if not (is_secret_key(key["key"]) or (before in ("?", "&") and key["key"].lower() in QUERY_ONLY_KEYS)):
        return None
    m = _VALUE.match(key.string, key.end())
    if m is None or key.string.startswith(MASK, key.end()):
        return None
    value = m[0]
    for group in _QUOTES:
        quote_ = m[group]
        if quote_:
            closed = value.endswith(quote_) and len(value) >= 2 * len(quote_)
            inner = value[len(quote_): len(value) - len(quote_)] if closed else value[len(quote_):]
            return quote_ + (_hide(inner, found) if inner else "") + (quote_ if closed else ""), m.end()
    scheme = m["scheme"] or ""
    secret = value[len(scheme):]
    return (scheme + _hide(secret, found), m.end()) if secret else None


def _pairs(text: str, found: _Found) -> str:
    """Every secret pair of ``text`` masked. A pair whose key is not secret is passed over only
    up to its value, which may hold pairs of its own (``url: https://h/?token=...``)."""
    parts, pos = [], 0
    while True:
        key = _KEY_SEP.search(text, pos)
        if key is None:
            return "".join(parts) + text[pos:]
        masked = _pair(key, found)
        parts.append(text[pos:key.end()])
        if masked is None:
            pos = key.end()
        else:
            parts.append(masked[0])
            pos = masked[1]


def _pem_tails(text: str, found: _Found) -> str:
    """Each key whose BEGIN line was cut off (a tail of output): the base64 lines before its
    END line, walked back line by line (linear; a regex would backtrack), and the base64 end
    of the text's first line when the walk reaches it. A whole block, already masked, ends
    in a ``***`` line and is left as it is."""
    out, pos = [], 0
    for end in _PEM_END.finditer(text):
        out.append(_pem_tail(text[pos:end.start()], found, at_start=pos == 0))
        pos = end.start()
    return "".join(out) + text[pos:] if out else text


def _pem_tail(segment: str, found: _Found, *, at_start: bool) -> str:
    pieces = _LINE_BREAK.split(segment)                # line, break, line, ..., line (empty before END)
    if len(pieces) < 3 or pieces[-1]:
        return segment
    j = len(pieces) - 3                                 # the last line before the END line (any length);
    while j >= 0 and pieces[j] and set(pieces[j]) <= _BASE64 and (j == len(pieces) - 3 or len(pieces[j]) >= 40):
        j -= 2                                          # the lines before it are full (64 chars in PEM)
    prefix, head = "".join(pieces[:j + 2]), ""          # j < 0: every line is the key's
    if j == 0 and at_start:                             # the text's first line may end with the key's start
        cut = len(pieces[0])
        while cut and pieces[0][cut - 1] in _BASE64:
            cut -= 1
        if len(pieces[0]) - cut >= 8:
            prefix, head = pieces[0][:cut], pieces[0][cut:] + pieces[1]
    secret = head + "".join(pieces[j + 2:-2])
    if len(secret) < 8:
        return segment
    _hide(secret, found)
    return prefix + MASK + pieces[-2]


def _redact_text(text: str, found: _Found) -> str:
    out = _PEM.sub(lambda m: m["begin"] + m["lead"] + (_hide(m["secret"], found) if m["secret"] else "")
                   + m["trail"] + m["end"], text)
    if "-----END" in out:
        out = _pem_tails(out, found)
    if "://" in out and "@" in out:
        out = _URL_PASSWORD.sub(lambda m: m["head"] + _hide(m["secret"], found) + m["tail"] if m["secret"] else m[0],
                                out)
    if _KEY_HINT.search(out):
        out = _pairs(out, found)
        out = _LONG_OPTION.sub(lambda m: m["flag"] + m["sep"] + _hide(m["secret"], found)
                               if is_secret_key(m["flag"]) and not m["flag"].startswith("--no-") and m["secret"] != MASK
                               else m[0], out)
    for client in _CLIENT_FLAGS if _CLIENT_HINT.search(out) else ():
        if client.program.search(out):
            out = "\n".join(client.pattern.sub(lambda m: m["head"] + _hide(m["secret"], found), line)
                            if client.program.search(line) else line for line in out.split("\n"))
    out = _SHAPED.sub(lambda m: _hide(m[0], found), out)
    return _BEARER.sub(lambda m: m["head"] + _hide(m["secret"], found), out)


def redact_text(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with every secret the rule finds, and every value in ``known``, replaced by ``***``."""
    if not text:
        return text
    return mask_values(_redact_text(text, None), known)


def _redact_argv(args: list[str], found: _Found) -> list[str]:
    """A command as a list of arguments: the text rule for each, plus what only the list shows
    (``["mysql", "-pSECRET"]``, ``["--password", "SECRET"]``)."""
    out = [_redact_text(a, found) for a in args]
    clients = [c for c in _CLIENT_FLAGS if any(c.program.fullmatch(a.rsplit("/", 1)[-1]) for a in args)]
    for i, arg in enumerate(args):
        for client in clients:
            hit = client.argv(args, i)
            if hit:
                out[hit[0]] = hit[1]
                _hide(hit[2], found)
        if (arg.startswith("--") and "=" not in arg and not arg.startswith("--no-") and is_secret_key(arg)
                and i + 1 < len(args) and not args[i + 1].startswith("-")):
            _hide(args[i + 1], found)
            out[i + 1] = MASK
    return out


def _redact(value: Any, found: _Found) -> Any:
    if isinstance(value, str):
        return _redact_text(value, found)
    if isinstance(value, dict):
        return {k: (_masked_value(v, found) if is_secret_key(k) and v not in (None, "") else _redact(v, found))
                for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return _redact_argv(value, found)
    if isinstance(value, (list, tuple)):
        return type(value)(_redact(v, found) for v in value)
    return value


def _masked_value(value: Any, found: _Found) -> str:
    if found is not None:
        _collect_all(value, found)
    return MASK


def _collect_all(value: Any, found: list[str]) -> None:
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_all(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_all(v, found)


def redact(value: Any, known: Iterable[str] = ()) -> Any:
    """A copy of ``value`` (JSON-like: dicts, lists, strings, numbers) with every secret masked,
    and every value in ``known`` wherever it appears in a string."""
    return mask_values(_redact(value, None), known)


def secret_values(*values: Any) -> frozenset[str]:
    """The secrets the rule finds in ``values`` (a job's configuration, a run's parameters):
    what its run's output, error and notification must not show either, even bare."""
    found: list[str] = []
    for value in values:
        _redact(value, found)
    out = set()
    for secret in found:
        secret = secret.strip()
        if len(secret) >= MIN_KNOWN_SECRET and secret.lower() not in ("true", "false", "null", "none"):
            out.add(secret)
            out.add(quote(secret, safe=""))
    return frozenset(out)


def mask_values(value: Any, known: Iterable[str]) -> Any:
    """``value`` (a string, or JSON-like data) with every occurrence of each of ``known`` masked."""
    secrets = sorted({k for k in known if k and len(k) >= MIN_KNOWN_SECRET}, key=len, reverse=True)
    if not secrets:
        return value
    pattern = re.compile("|".join(re.escape(s) for s in secrets))
    return _map_strings(value, lambda s: pattern.sub(MASK, s))


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_strings(v, fn) for v in value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in every record a handler (or logger) emits.

    The CLI puts it on its handler, and the engine on each driver's logger
    (``mjsched.job.<driver>``), whose records name what a job runs; an application that
    embeds the engine can put it on its own handler too:
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


def guard_logger(logger: logging.Logger) -> logging.Logger:
    """``logger`` with a :class:`RedactingFilter` (once): its records are masked for every handler."""
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger


def redact_dsn(dsn: str) -> str:
    """``dsn`` (a URL or key=value string) with any password replaced by ``***``, safe for logs and
    error messages: the same rule as :func:`redact_text`."""
    return redact_text(dsn)
