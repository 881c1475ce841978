"""Where is a task? The celery driver asks the workers that consume the task's queue.

A ``wait`` run whose task never reaches a final state would hold its job until
``max_runtime``: a message acknowledged on receipt by a worker that then died is gone and
its state stays PENDING (or STARTED) for ever. So the driver asks, every few seconds, only
the workers that consume the task's queue (a worker of another application on the same
broker knows nothing of our tasks, and its "not registered" means nothing) whether any of
them holds the task id (active, reserved or scheduled):

* no consumer of the queue answered (restarting, deploying): ``UNKNOWN``, keep waiting;
* a consumer holds it: ``HELD``;
* the consumers that answered all lack the task name: ``UNREGISTERED``;
* none holds it and every one is busy (each pool slot taken): the message may be waiting
  in the broker's queue: ``UNKNOWN``;
* none holds it and one of them has a free slot (it would have taken a waiting message):
  ``NOT_HELD``. :class:`LostWatch` turns repeated such answers into the verdict "lost".
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

HELD, NOT_HELD, UNKNOWN, UNREGISTERED = "held", "not_held", "unknown", "unregistered"
INSPECT_TIMEOUT = 1.0          # seconds one broadcast waits for answers
LOST_ANSWERS = 3               # consecutive NOT_HELD answers, at the least, before a task is lost


@dataclass(frozen=True)
class Answer:
    """What the queue's consumers said about one task id."""

    verdict: str
    consumers: tuple[str, ...] = ()      # workers consuming the queue that answered
    holders: tuple[str, ...] = ()        # of them, those holding the task (active, reserved, scheduled)


def task_queue(app: Any, configuration: dict[str, Any], task_name: str) -> str:
    """The queue the task's message goes to: the job's ``queue``, else the app's routing."""
    queue = configuration.get("queue")
    if queue:
        return str(queue)
    try:
        routed = app.amqp.router.route({}, task_name)
        name = getattr(routed.get("queue"), "name", None)
        if name:
            return str(name)
    except Exception:  # noqa: BLE001 - routing is the app's code; fall back to its default queue
        log.debug("could not route %s; using the default queue", task_name, exc_info=True)
    return str(app.conf.task_default_queue or "celery")


def _ids(entries: Any) -> set[str]:
    """Task ids in one worker's active/reserved/scheduled answer."""
    found: set[str] = set()
    for entry in entries or ():
        if isinstance(entry, dict):
            request = entry.get("request") if isinstance(entry.get("request"), dict) else entry
            if request.get("id"):
                found.add(str(request["id"]))
    return found


def ask(app: Any, queue: str, task_name: str, task_id: str) -> Answer:
    """Ask the consumers of ``queue`` about ``task_id`` (a few broadcasts, ~1 s each at most)."""
    queues = app.control.inspect(timeout=INSPECT_TIMEOUT).active_queues() or {}
    consumers = sorted(w for w, qs in queues.items() if any(isinstance(q, dict) and q.get("name") == queue
                                                            for q in qs or ()))
    if not consumers:
        return Answer(UNKNOWN)
    inspect = app.control.inspect(destination=consumers, timeout=INSPECT_TIMEOUT, limit=len(consumers))
    return judge(consumers, task_name, task_id, Replies(inspect.active() or {}, inspect.reserved() or {},
                                                        inspect.scheduled() or {}, inspect.registered() or {},
                                                        inspect.stats() or {}))


@dataclass(frozen=True)
class Replies:
    """The consumers' answers to ``celery inspect``, by worker name."""

    active: dict[str, Any]
    reserved: dict[str, Any]
    scheduled: dict[str, Any]
    registered: dict[str, Any]
    stats: dict[str, Any]


def judge(consumers: list[str], task_name: str, task_id: str, replies: Replies) -> Answer:
    """The verdict of the consumers' replies (pure: see the module docstring)."""
    answered = tuple(w for w in consumers if w in replies.active and w in replies.reserved)
    if not answered:
        return Answer(UNKNOWN, tuple(consumers))
    holders = tuple(w for w in answered if task_id in _ids(replies.active.get(w)) | _ids(replies.reserved.get(w))
                    | _ids(replies.scheduled.get(w)))
    if holders:
        return Answer(HELD, answered, holders)
    registered = replies.registered
    if registered and all(w in registered for w in answered) and not any(
            str(n).split(" ")[0] == task_name for w in answered for n in registered[w] or ()):
        return Answer(UNREGISTERED, answered)
    # A worker with a free slot and nothing reserved takes a waiting message at once, so the
    # task is not in the queue either; when all are full it may be waiting there.
    free = [w for w in answered
            if len(replies.active.get(w) or ()) + len(replies.reserved.get(w) or ()) < _slots(replies.stats.get(w))]
    return Answer(NOT_HELD if free else UNKNOWN, answered)


def _slots(stats: Any) -> int:
    """A worker's pool size (1 when it does not say)."""
    try:
        return max(1, int(stats["pool"]["max-concurrency"]))
    except (TypeError, KeyError, ValueError):
        return 1


class LostWatch:
    """Consecutive NOT_HELD answers: the task is lost once there were ``LOST_ANSWERS`` of them
    spanning at least ``lost_after`` seconds. Any other answer starts the count again."""

    def __init__(self, lost_after: float) -> None:
        self.lost_after = lost_after
        self.since: float | None = None
        self.count = 0

    def note(self, answer: Answer, now: float) -> bool:
        """Record one answer at ``now`` (monotonic); True when the task is lost."""
        if answer.verdict != NOT_HELD:
            self.since, self.count = None, 0
            return False
        if self.since is None:
            self.since = now
        self.count += 1
        return self.count >= LOST_ANSWERS and now - self.since >= self.lost_after
