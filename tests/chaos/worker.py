"""One engine in its own process, for the chaos tests.

    python -m tests.chaos.worker --dsn DSN --instance NAME --workdir DIR [options]

Writes ``<workdir>/<instance>.ready`` once polling, logs to
``<workdir>/<instance>.log``, and on SIGTERM/SIGINT stops polling (draining at most
``--drain`` seconds), closes the engine and writes ``<instance>.stats.json``
(engine, keeper, poller and injected-fault counters).
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    # SIGUSR1 prints every thread's stack to stderr: the harness asks for it when a stop overruns
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--cap", type=int, default=10)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--heartbeat", type=float, default=None)
    parser.add_argument("--max-poll", type=float, default=1.0)
    parser.add_argument("--drain", type=float, default=15.0)
    parser.add_argument("--fault-before", type=float, default=0.0)
    parser.add_argument("--fault-after", type=float, default=0.0)
    parser.add_argument("--fault-connect", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)

    logging.basicConfig(filename=os.path.join(args.workdir, f"{args.instance}.log"), level=args.log_level,
                        format="%(asctime)s %(process)d %(threadName)s %(name)s %(levelname)s %(message)s")
    import mjsched

    from tests.chaos.faults import FaultPlan

    options: dict[str, object] = {}
    plan = None
    if args.fault_before or args.fault_after or args.fault_connect:
        plan = FaultPlan(before=args.fault_before, after=args.fault_after, connect=args.fault_connect,
                         seed=args.seed)
        options["connection_factory"] = plan.connection_factory()
    engine = mjsched.SchedulingEngine(args.dsn, max_concurrent_jobs=args.cap, lease_timeout=args.lease,
                                      instance_name=args.instance, max_poll_interval=args.max_poll,
                                      heartbeat_interval=args.heartbeat, **options)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    while True:  # the database may be flaky on purpose: start-up is retried too
        try:
            engine.start_polling()
            break
        except mjsched.SchedulerError as exc:
            logging.getLogger("worker").warning("start_polling failed, retrying: %s", exc)
            if stop.wait(0.2) or time.monotonic() - started > 30:
                return 3
    with open(os.path.join(args.workdir, f"{args.instance}.ready"), "w") as fh:
        fh.write(str(os.getpid()))
    stop.wait()
    t0 = time.monotonic()
    engine.stop_polling(wait=True, max_wait=args.drain)
    drained = time.monotonic() - t0
    stats = {
        "instance": args.instance, "pid": os.getpid(), "engine": dict(engine.stats),
        "drain_seconds": drained, "still_busy": engine.inflight, "leaked": engine.leaked,
        # diagnostics from the engine's parts (private: read defensively)
        "keeper_renewals": _private(engine, "_keeper.renewals"),
        "keeper_failures": _private(engine, "_keeper.failures"),
        "poller_polls": _private(engine, "_poller.polls"),
        "poller_failures": _private(engine, "_poller.failures"),
        "faults": plan.snapshot() if plan else None,
        "holds": list(plan.holds) if plan else [],
    }
    engine.close()
    # engine.close() does not join its listener thread (it notices the stop within a
    # second); let daemon threads leave libpq before the interpreter finalises.
    lingering = [t for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]
    deadline = time.monotonic() + 3.0
    for thread in lingering:
        thread.join(max(0.0, deadline - time.monotonic()))
    stats["threads_at_exit"] = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
    with open(os.path.join(args.workdir, f"{args.instance}.stats.json"), "w") as fh:
        json.dump(stats, fh)
    return 0


def _private(obj: object, path: str) -> int:
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return obj if isinstance(obj, int) else 0


if __name__ == "__main__":
    sys.exit(main())
