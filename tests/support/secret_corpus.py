"""The redaction corpus: credential forms as they appear in text, each with a distinct secret,
and ordinary lines that must come through unchanged.

A probe is one line (``text``) holding one ``secret``; after redaction the secret must be
gone and each of ``kept`` (the rest of the line) still there. The same probes go through
every surface that prints run data (tests/unit/test_redaction_corpus.py for the rule,
tests/cli/test_secret_surfaces.py for the dashboard, the CLI, logs and notifications).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    name: str
    text: str
    secret: str
    kept: tuple[str, ...]


def _s(n: int) -> str:
    """The n-th secret: a marker no ordinary output contains."""
    return f"Zq{n:02d}sEcReT{n:02d}x"


_BASIC = base64.b64encode(f"deploy:{_s(10)}".encode()).decode()
_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwcm9iZTE5In0.Zq19sEcReT19xSignaturePart"

PROBES: tuple[Probe, ...] = (
    # the probes
    Probe("aws-secret-in-shell", f"AWS_SECRET_ACCESS_KEY={_s(1)} aws s3 ls s3://probe-bucket",
          _s(1), ("AWS_SECRET_ACCESS_KEY=", "aws s3 ls s3://probe-bucket")),
    Probe("bearer-header", f'curl -H "Authorization: Bearer {_s(2)}" https://api.example/v1/items',
          _s(2), ("Authorization: Bearer", "https://api.example/v1/items")),
    Probe("x-api-key-header", f"X-Api-Key: {_s(3)} (sent to api.example)", _s(3),
          ("X-Api-Key:", "(sent to api.example)")),
    Probe("url-query-key", f"GET https://maps.example/api?key={_s(4)}&q=berlin done", _s(4),
          ("https://maps.example/api?key=", "&q=berlin done")),
    Probe("url-query-sig", f"https://acct.blob.example/c/f.csv?sv=2024-01&sig={_s(5)}&se=2026", _s(5),
          ("sv=2024-01", "&se=2026")),
    Probe("mysql-p-flag", f"mysql -uroot -p{_s(6)} -h db.internal shop", _s(6),
          ("mysql -uroot -p", "-h db.internal shop")),
    Probe("python-dict-text", f"{{'password': '{_s(7)}', 'host': 'db1.internal'}}", _s(7),
          ("'password': '", "'host': 'db1.internal'")),
    Probe("json-text", f'{{"client_secret": "{_s(8)}", "client_id": "probe-client"}}', _s(8),
          ('"client_secret": "', '"client_id": "probe-client"')),
    # common credential forms
    Probe("basic-auth-header", f"Authorization: Basic {_BASIC}", _BASIC, ("Authorization: Basic",)),
    Probe("curl-user", f"curl -u deploy:{_s(11)} https://ci.example/hook", _s(11),
          ("curl -u deploy:", "https://ci.example/hook")),
    Probe("postgresql-url", f"connecting to postgresql://app:{_s(12)}@db.internal:5432/app now", _s(12),
          ("postgresql://app:", "@db.internal:5432/app now")),
    Probe("libpq-keywords", f"host=db.internal password={_s(13)} dbname=app user=app", _s(13),
          ("host=db.internal", "dbname=app user=app")),
    Probe("mssql-url", f"mssql://sa:{_s(14)}@sql.internal:1433/app?encrypt=yes", _s(14),
          ("mssql://sa:", "@sql.internal:1433/app?encrypt=yes")),
    Probe("odbc-string",
          f"DRIVER={{ODBC Driver 18 for SQL Server}};SERVER=sql.internal;UID=sa;PWD={_s(15)};DATABASE=app",
          _s(15), ("SERVER=sql.internal;UID=sa;PWD=", ";DATABASE=app")),
    Probe("odbc-braced-password", f"Server=sql.internal;Password={{{_s(16)};x}};Database=app", _s(16),
          ("Server=sql.internal", ";Database=app")),
    Probe("redis-broker-url", f"broker redis://:{_s(17)}@cache.internal:6379/0 unreachable", _s(17),
          ("redis://:", "@cache.internal:6379/0 unreachable")),
    Probe("amqp-broker-url", f"amqp://guest:{_s(18)}@mq.internal:5672// refused", _s(18),
          ("amqp://guest:", "@mq.internal:5672// refused")),
    Probe("jwt", f"token accepted: {_JWT} for probe", _JWT, ("for probe",)),
    Probe("aws-access-key-id", "key id AKIAZQ20SECRET20XYZW in use", "AKIAZQ20SECRET20XYZW", ("key id", "in use")),
    Probe("github-token", f"push with ghp_Zq21sEcReT21x{'a' * 24} ok", f"ghp_Zq21sEcReT21x{'a' * 24}",
          ("push with", "ok")),
    Probe("yaml-password", f"  password: {_s(22)}", _s(22), ("password:",)),
    Probe("long-option-equals", f"deploy --api-token={_s(23)} --region eu-west-1", _s(23),
          ("deploy --api-token=", "--region eu-west-1")),
    Probe("long-option-space", f"docker login --password {_s(24)} registry.example", _s(24),
          ("docker login --password", "registry.example")),
    Probe("ini-spaced", f"aws_secret_access_key = {_s(25)}", _s(25), ("aws_secret_access_key =",)),
    Probe("export-quoted", f'export GITHUB_TOKEN="{_s(26)}" && make release', _s(26),
          ("export GITHUB_TOKEN=", "&& make release")),
    Probe("presigned-url", f"https://b.s3.example/o?X-Amz-Expires=60&X-Amz-Signature={_s(27)}&x-id=GetObject", _s(27),
          ("X-Amz-Expires=60", "&x-id=GetObject")),
    Probe("python-kwargs", f"connect(user='app', password='{_s(28)}', host='db.internal')", _s(28),
          ("connect(user='app', password='", "host='db.internal')")),
    Probe("escaped-json", f'"payload": "{{\\"api_key\\": \\"{_s(29)}\\", \\"region\\": \\"eu\\"}}"', _s(29),
          ('\\"region\\": \\"eu\\"',)),
    Probe("sshpass", f"sshpass -p {_s(30)} ssh backup@nas.internal", _s(30), ("sshpass -p", "ssh backup@nas.internal")),
    Probe("redis-cli", f"redis-cli -h cache.internal -a {_s(31)} PING", _s(31),
          ("redis-cli -h cache.internal -a", "PING")),
    Probe("stripe-key", "charged with sk_live_Zq32sEcReT32xAAAAAAAA today", "sk_live_Zq32sEcReT32xAAAAAAAA",
          ("charged with", "today")),
    Probe("pem-private-key",
          f"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA{_s(33)}\n-----END RSA PRIVATE KEY-----",
          _s(33), ("-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----")),
    Probe("pem-cut-at-start", f"AAKCAQEA{_s(34)}AAAA\n-----END PRIVATE KEY-----\nsigned", _s(34),
          ("-----END PRIVATE KEY-----", "signed")),
    Probe("secret-key-colon-quoted", f"secret: \"{_s(35)}\" (rotated)", _s(35), ("(rotated)",)),
)

# Lines with words near credentials that must come through unchanged.
ORDINARY: tuple[str, ...] = (
    "keyboard layout=us",
    "passwordless login enabled",
    "token bucket refilled: 10 tokens left",
    "monkey=banana",
    "tokenizer=bert-base-uncased",
    "key=value pairs are parsed",
    "secretary: Alice",
    "author: Jane Doe",
    "token_type=bearer expires_in=3600",
    "password_file=/run/secrets/db",
    "psql -p 5432 -h db.internal app",
    "ssh -p2222 backup@nas.internal",
    "docker run -p 8080:80 nginx",
    "the password was rejected; try again",
    "Bearer of bad news",
    "https://example.com/search?q=keyboard&page=2",
    "postgresql://app@db.internal/app and mailto:ops@example.com",
    "token mismatch: the slot was handed off",
    "Basic usage: mjsched run",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----",
    "exit_code: 3",
)

# Known secrets a job holds in its configuration and its run prints bare.
KNOWN_SECRET = "Zq90sEcReT90x"
