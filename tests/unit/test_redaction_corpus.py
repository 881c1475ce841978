"""The one redaction rule over the corpus: every credential form masked in text, in data and
in a command's argument list, the rest of each line kept, ordinary lines untouched; a job's
own secret values masked where they reappear bare."""
from __future__ import annotations

import json
import shlex

import pytest

from mjsched.redaction import MASK, is_secret_key, mask_values, redact, redact_text, secret_values
from tests.support.secret_corpus import KNOWN_SECRET, ORDINARY, PROBES, Probe


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_text_form_is_masked_and_the_rest_kept(probe: Probe) -> None:
    out = redact_text(probe.text)
    assert probe.secret not in out, out
    assert MASK in out
    for kept in probe.kept:
        assert kept in out, (kept, out)


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_probe_inside_data_is_masked(probe: Probe) -> None:
    """As a configuration value, a list item, and inside JSON text."""
    data = {"command": ["sh", "-c", probe.text], "note": probe.text, "nested": [{"line": probe.text}]}
    assert probe.secret not in json.dumps(redact(data))
    assert probe.secret not in redact_text(json.dumps({"stdout_tail": probe.text}))


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_text_is_not_masked(line: str) -> None:
    assert redact_text(line) == line
    assert redact({"line": line}) == {"line": line}


@pytest.mark.parametrize("argv, secret", [
    (["mysql", "-uroot", "-pZq40sEcReT40x", "shop"], "Zq40sEcReT40x"),
    (["/usr/bin/sshpass", "-p", "Zq41sEcReT41x", "ssh", "nas"], "Zq41sEcReT41x"),
    (["redis-cli", "-a", "Zq42sEcReT42x", "PING"], "Zq42sEcReT42x"),
    (["curl", "-u", "deploy:Zq43sEcReT43x", "https://ci.example"], "Zq43sEcReT43x"),
    (["deploy", "--api-token", "Zq44sEcReT44x", "--region", "eu"], "Zq44sEcReT44x"),
])
def test_argument_lists(argv: list[str], secret: str) -> None:
    out = redact({"command": argv})["command"]
    assert secret not in json.dumps(out) and any(MASK in a for a in out)
    assert [a for a in out if MASK not in a] == [a for a in argv if secret not in a]
    assert secret not in redact_text(shlex.join(argv))


@pytest.mark.parametrize("argv", [["psql", "-p", "5432", "app"], ["ssh", "-p2222", "nas"],
                                  ["pg_dump", "--no-password", "app"], ["sort", "-u", "a:b"]])
def test_ordinary_argument_lists(argv: list[str]) -> None:
    assert redact({"command": argv}) == {"command": argv}


@pytest.mark.parametrize("key", ["password", "db_password", "PWD", "apiKey", "X-Api-Key", "secret", "client_secret",
                                 "AWS_SECRET_ACCESS_KEY", "authToken", "token", "private_key", "Authorization", "sig",
                                 "sslpassword", "--api-token", "X-Amz-Signature"])
def test_the_same_keys_in_data_and_text(key: str) -> None:
    assert is_secret_key(key)
    assert redact({key: "v4lue", "host": "h"}) == {key: MASK, "host": "h"}
    for text in (f"{key}=v4lue host=h", f"{key}: v4lue", f'{{"{key}": "v4lue", "host": "h"}}', f"{{'{key}': 'v4lue'}}"):
        out = redact_text(text)
        assert "v4lue" not in out, (key, text, out)


@pytest.mark.parametrize("key", ["host", "command", "statement", "url", "monkey", "tokenizer_name", "cwd", "key",
                                 "keyboard", "passwordless", "token_type", "password_file", "secret_name", "author"])
def test_ordinary_keys_in_data_and_text(key: str) -> None:
    assert not is_secret_key(key)
    assert redact({key: "v4lue"}) == {key: "v4lue"}
    assert redact_text(f"{key}=v4lue") == f"{key}=v4lue"


def test_a_jobs_own_secrets_are_masked_where_they_reappear_bare() -> None:
    configuration = {"command": ["sh", "-c", "AWS_SECRET_ACCESS_KEY=Zq50sEcReT50x ./sync"],
                     "env": {"DB_PASS": KNOWN_SECRET, "REGION": "eu-west-1"},
                     "dsn": "postgresql://app:Zq51sEcReT51x@db/app", "timeout": 30}
    known = secret_values(configuration)
    assert {KNOWN_SECRET, "Zq50sEcReT50x", "Zq51sEcReT51x"} <= known
    assert "eu-west-1" not in known
    output = f"connecting as app with {KNOWN_SECRET} in eu-west-1; key Zq50sEcReT50x; Zq51sEcReT51x"
    shown = mask_values(output, known)
    assert shown == f"connecting as app with {MASK} in eu-west-1; key {MASK}; {MASK}"
    assert redact_text(output, known) == shown
    assert redact({"stdout_tail": output}, known) == {"stdout_tail": shown}


def test_short_and_boolean_values_are_not_searched_for() -> None:
    assert secret_values({"password": "abc", "token": "true"}) == frozenset()
