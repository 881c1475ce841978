"""The celery driver's pure decisions: what the queue's consumers' replies mean, when a task
counts as lost, and what the allow-list admits (no broker, no worker, no Celery import)."""
from __future__ import annotations

from typing import Any

import pytest

from mjsched.drivers.celery_probe import HELD, NOT_HELD, UNKNOWN, UNREGISTERED, Answer, LostWatch, Replies, judge
from mjsched.drivers.celery_trust import CeleryAllowList, place
from mjsched.errors import ConfigurationError

W = "w1@host"
TASK = {"id": "t-1", "name": "t.add"}
OTHER = {"id": "t-2", "name": "t.add"}


def replies(active: Any = (), reserved: Any = (), scheduled: Any = (), registered: Any = ("t.add",),
            slots: int = 2, answered: bool = True) -> Replies:
    if not answered:
        return Replies({}, {}, {}, {}, {})
    return Replies({W: list(active)}, {W: list(reserved)}, {W: list(scheduled)}, {W: list(registered)},
                   {W: {"pool": {"max-concurrency": slots}}})


@pytest.mark.parametrize("given, verdict", [
    (replies(answered=False), UNKNOWN),                                   # ours restarting: no answer
    (replies(active=[TASK]), HELD),
    (replies(reserved=[TASK]), HELD),
    (replies(scheduled=[{"eta": "...", "request": TASK}]), HELD),
    (replies(registered=["other.ping"]), UNREGISTERED),
    (replies(registered=["t.add [rate_limit=1/s]"]), NOT_HELD),           # idle, registered, not holding it
    (replies(active=[OTHER, OTHER]), UNKNOWN),                            # busy: it may wait in the queue
    (replies(active=[OTHER], reserved=[OTHER]), UNKNOWN),                 # a slot taken by a reserved one
    (replies(active=[OTHER]), NOT_HELD),                                  # a free slot, nothing reserved
])
def test_what_the_consumers_replies_mean(given: Replies, verdict: str) -> None:
    assert judge([W], "t.add", "t-1", given).verdict == verdict


def test_lost_needs_three_not_held_answers_spanning_lost_after() -> None:
    watch = LostWatch(10.0)
    not_held, held = Answer(NOT_HELD, (W,)), Answer(HELD, (W,), (W,))
    assert not watch.note(not_held, 0.0) and not watch.note(not_held, 3.0)
    assert not watch.note(not_held, 6.0)                   # three answers, but only 6 s
    assert not watch.note(held, 8.0)                       # any other answer starts again
    assert [watch.note(not_held, t) for t in (9.0, 12.0, 15.0, 19.0)] == [False, False, False, True]
    unknown_between = LostWatch(0.0)
    assert not unknown_between.note(not_held, 0) and not unknown_between.note(Answer(UNKNOWN), 1)
    assert not unknown_between.note(not_held, 2) and not unknown_between.note(not_held, 3)
    assert unknown_between.note(not_held, 4)


@pytest.mark.parametrize("configuration, refused", [
    ({"app": "proj.celery:app"}, None),
    ({"app": "evil.mod:app"}, "celery app 'evil.mod:app' is not allowed"),
    ({"app": "amqp://u:p@MQ.internal//"}, None),                           # credentials and case ignored
    ({"app": "pyamqp://mq.internal:5672/vhost"}, None),                    # no path allowed: any vhost
    ({"app": "amqp://mq.internal:5673//"}, "celery broker amqp://mq.internal:5673// is not allowed"),
    ({"app": "redis://cache:6379/1"}, None),
    ({"app": "redis://cache:6379/2"}, "celery broker redis://cache:6379/2 is not allowed"),
    ({"app": "redis://cache/1", "backend": "redis://elsewhere/0"}, "celery result backend redis://elsewhere:6379/0"),
    ({"task": "no app"}, None),                                            # the driver's checks name it
])
def test_the_allow_list(configuration: dict[str, Any], refused: str | None) -> None:
    allow = CeleryAllowList.of(["proj.celery:app"], "amqp://mq.internal, redis://cache:6379/1")
    assert allow is not None
    reason = allow.refusal(configuration)
    assert (reason is None) if refused is None else (reason is not None and reason.startswith(refused)), reason


def test_allow_list_settings_are_checked() -> None:
    assert CeleryAllowList.of(None, None) is None
    nothing = CeleryAllowList.of([], [])
    assert nothing is not None and nothing.refusal({"app": "a.b:app"}) and nothing.refusal({"app": "redis://x/0"})
    with pytest.raises(ConfigurationError, match="celery_allowed_apps='proj.celery'"):
        CeleryAllowList.of(["proj.celery"], None)
    with pytest.raises(ConfigurationError, match="celery_allowed_brokers"):
        CeleryAllowList.of(None, ["not a url"])
    assert str(place("rediss://:pw@h:6380/3")) == "rediss://h:6380/3"
