"""One engine process of the rolling-upgrade test, of whichever release PYTHONPATH selects.

Run as ``python upgrade_child.py ROLE DSN SPEC_JSON MAX_LIFE``. It talks to the test
through lines: JSON events on stdout, commands on stdin ("stop"); logs at WARNING and
above go to stderr with their ``action``. ROLE "old" installs, creates the jobs in
SPEC_JSON through its own API and polls; ROLE "new" installs and polls. Only the public
API both releases share is used. MAX_LIFE bounds the process if the test never says stop.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any


class _ActionFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.action_tag = getattr(record, "action", "-")
        return super().format(record)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}, default=str), flush=True)


def main() -> int:
    role, dsn, spec, max_life = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ActionFormatter(
        f"{role} %(asctime)s %(levelname)s %(name)s [%(action_tag)s] %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])

    import mjsched  # resolved through PYTHONPATH: the release under test

    emit("ready", pid=os.getpid(), mjsched_file=mjsched.__file__, version=mjsched.__version__)
    engine = mjsched.SchedulingEngine(dsn, max_concurrent_jobs=spec["cap"], lease_timeout=spec["lease"],
                                      instance_name=f"{role}-{os.getpid()}", max_poll_interval=1.0)
    started = time.time()
    applied = engine.install()
    emit("installed", applied=applied, started=started)
    if role == "old":
        ids = {}
        for job in spec["jobs"]:
            ids[job["name"]] = engine.create_job(job["name"], "python", job["cron"], configuration={
                "callable": "upgrade_probe:record", "kwargs": {"dsn": dsn, "hold": job["hold"]}},
                **job["fields"])
        emit("jobs", ids=ids)
    engine.start_polling()
    emit("polling")

    stop = threading.Event()

    def read_commands() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()   # "stop", or the test's end of stdin
    threading.Thread(target=read_commands, daemon=True).start()
    told = stop.wait(max_life)
    engine.stop_polling(wait=True, max_wait=10)
    poller = getattr(engine, "_poller", None)
    emit("stopped", told=told, stats=dict(engine.stats), poll_failures=getattr(poller, "failures", None))
    engine.close()
    return 0 if told else 3


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        code = 2
    sys.exit(code)
