"""Trace one second of the latency bench inside one engine: when claims are made, how many
per batch, the wait from a slot freeing to the next claim, claim reply -> driver start,
the completion writer's batches and the poll loop's wake-ups.

    python -m bench.latency_trace [--dsn DSN] [--jobs 200] [--cap 50] [--seconds 4] [--second 3]
    python -m bench.latency_trace --every-second [--seconds 30]

``--every-second`` prints a line per second instead: when its last driver began, what its
claims took, and what else ran during its burst (completions, sweeps, lease renewals,
the collector's pauses), slowest seconds first: is a slow second's tail the claims, or
something beside them?

The engine runs in this process with its parts wrapped (nothing in mjsched changes);
times are this host's wall clock, shown in ms after the traced second's due instant
(the offset to the database clock is measured and printed; on one host it is ~0).
"""
from __future__ import annotations

import functools
import gc
import statistics
import threading
import time
from typing import Any, Callable, Sequence

from . import common

EVENTS: list[tuple[float, str, dict[str, Any]]] = []


def _note(kind: str, **info: Any) -> None:
    EVENTS.append((time.time(), kind, info))


def _wrap(obj: Any, name: str, before: Callable[..., None] | None = None,
          after: Callable[..., None] | None = None) -> None:
    inner = getattr(obj, name)

    @functools.wraps(inner)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        t0 = time.time()
        if before:
            before(t0, *args, **kwargs)
        out = inner(*args, **kwargs)
        if after:
            after(t0, out, *args, **kwargs)
        return out
    setattr(obj, name, wrapped)


def instrument(engine: Any) -> None:
    from mjsched.engine.dispatch import PendingClaim
    from mjsched.engine.run import Run, State

    _wrap(engine.backend, "claim_due_jobs", after=lambda t0, out, inst, n, *a, **k: _note(
        "claim", t0=t0, free=n, got=len(out.claims), due_left=getattr(out, "due_left", None),
        thread=threading.current_thread().name))
    _wrap(engine.backend, "get_jobs", after=lambda t0, out, ids: _note("get_jobs", t0=t0, n=len(ids)))
    _wrap(engine.backend, "complete_runs", after=lambda t0, out, items, *a, **k: _note(
        "complete", t0=t0, n=len(items)))
    _wrap(engine.backend, "sweep_expired_leases", after=lambda t0, out, *a, **k: _note("sweep", t0=t0))
    _wrap(engine.parts.dispatcher, "dispatch", after=lambda t0, out, *a, **k: _note(
        "poll", t0=t0, delay=out[1], dispatched=out[0].dispatched))
    # one claim on the dispatcher thread: from its turn (PendingClaim.first_time, the first step of
    # each claim) to its run prepared (Run.begin), its definition check and plan between
    turns: dict[str, float] = {}
    _wrap(PendingClaim, "first_time", before=lambda t0, pending, claim: (
        turns.__setitem__(claim.run_id, t0), _note("start_claim", run=claim.run_id)))
    _wrap(Run, "begin", after=lambda t0, out, services, job, run_id, *a, **k: _note(
        "start_claim_done", t0=turns.pop(run_id, t0)))
    _wrap(Run, "execute", before=lambda t0, run: _note("driver_thread", run=run.run_id))
    _wrap(Run, "_move", before=lambda t0, run, new, **k: _note(
        "slot_freed", run=run.run_id) if new is State.COMPLETING else None)
    _wrap(engine.parts.wakeup, "wake", before=lambda t0: _note("wake"))
    _wrap(engine.backend, "renew_leases", after=lambda t0, out, *a, **k: _note("renew", t0=t0))
    _wrap(engine.backend, "purge_runs", after=lambda t0, out, *a, **k: _note("purge", t0=t0))
    gc.callbacks.append(_note_gc)


_gc_started: list[float] = []


def _note_gc(phase: str, info: dict[str, Any]) -> None:
    """The collector's pauses, as events like the calls (t0 = when it began)."""
    if phase == "start":
        _gc_started[:] = [time.time()]
    elif _gc_started:
        _note("gc", t0=_gc_started[0], generation=info.get("generation"))


def pct(values: Sequence[float], q: float) -> float:
    return common.percentile(list(values), q)


def analyse(first: float, second: int, offset: float) -> None:
    lo, hi = first + second - 1 + offset, first + second + offset   # wall time of the traced second
    start, end = lo - 0.05, hi
    ev = [(t, k, i) for t, k, i in EVENTS if start <= t < end]
    ms = lambda t: (t - lo) * 1000   # noqa: E731
    print(f"\n### one second traced (ms after its due instant; database clock = wall {offset * 1000:+.2f} ms)\n")
    claims = [(i["t0"], t, i) for t, k, i in ev if k == "claim"]
    print("claims (call start -> reply, free slots, claimed, due left):")
    for t0, t1, i in claims:
        print(f"  {ms(t0):8.1f} -> {ms(t1):8.1f}  free={i['free']:3d} got={i['got']:3d} due_left={i['due_left']}")
    polls = [(i["t0"], t, i) for t, k, i in ev if k == "poll"]
    print(f"polls: {len(polls)}; starts (ms): {', '.join(f'{ms(a):.1f}' for a, _, _ in polls[:40])}")
    print(f"  poll durations ms: p50 {pct([(b - a) * 1000 for a, b, _ in polls], .5):.1f}, "
          f"max {max([(b - a) * 1000 for a, b, _ in polls] or [0]):.1f}")
    for name in ("get_jobs", "complete", "sweep"):
        calls = [(i["t0"], t, i) for t, k, i in ev if k == name]
        print(f"{name}: {len(calls)} calls: " + ", ".join(
            f"{ms(a):.1f}+{(b - a) * 1000:.1f}" + (f"(n={i['n']})" if "n" in i else "") for a, b, i in calls[:30]))
    took = [(t - i["t0"]) * 1000 for t, k, i in ev if k == "start_claim_done"]
    print(f"start_claim (one claim, on the dispatcher thread) ms: p50 {pct(took, .5):.3f} p99 {pct(took, .99):.3f}"
          f" sum {sum(took):.1f}")
    wakes = [t for t, k, _ in ev if k == "wake"]
    print(f"wake() calls: {len(wakes)}")
    # claim reply -> driver start, per run
    started = {i["run"]: t for t, k, i in ev if k == "start_claim"}
    thread = {i["run"]: t for t, k, i in ev if k == "driver_thread"}
    reply_of: dict[str, float] = {}
    for t0, t1, i in claims:
        for t, k, j in ev:
            if k == "start_claim" and t >= t1 and j["run"] not in reply_of:
                nxt = [c for c in claims if c[0] > t1]
                if not nxt or t < nxt[0][0]:
                    reply_of[j["run"]] = t1
    handoff = [(thread[r] - started[r]) * 1000 for r in started if r in thread]
    reply_to_driver = [(thread[r] - reply_of[r]) * 1000 for r in reply_of if r in thread]
    print(f"start_claim -> driver thread ms: p50 {pct(handoff, .5):.2f} p99 {pct(handoff, .99):.2f} "
          f"max {max(handoff or [0]):.2f}")
    print(f"claim reply -> driver thread ms: p50 {pct(reply_to_driver, .5):.2f} p99 {pct(reply_to_driver, .99):.2f} "
          f"max {max(reply_to_driver or [0]):.2f}")
    frees = sorted(t for t, k, _ in ev if k == "slot_freed")
    gaps = []
    for f in frees:
        nxt = [a for a, _, i in claims if a >= f and i["got"] > 0] + [a for a, _, i in claims if a >= f]
        if nxt:
            gaps.append((min(nxt) - f) * 1000)
    print(f"slot freed -> next claim call ms: p50 {pct(gaps, .5):.1f} p99 {pct(gaps, .99):.1f} "
          f"max {max(gaps or [0]):.1f} ({len(frees)} slots freed)")
    drv = sorted(ms(t) for t in thread.values())
    print(f"driver starts (ms): first {drv[0] if drv else 0:.1f}, p50 {pct(drv, .5):.1f}, p99 {pct(drv, .99):.1f}, "
          f"last {drv[-1] if drv else 0:.1f} ({len(drv)} runs)")


BURST_SECONDS = 0.2   # a second's runs have all begun within this (cap 50: about 40-80 ms)


def every_second(first: float, seconds: int, offset: float) -> None:
    """One line per second of the window, slowest first (by its last driver start)."""
    rows = []
    for n in range(1, seconds):      # the first second starts from a cold engine
        lo = first + n + offset
        ev = [(t, k, i) for t, k, i in EVENTS if lo - 0.05 <= t < lo + BURST_SECONDS]
        starts = [t for t, k, _ in ev if k == "driver_thread" and t >= lo]
        if not starts:
            continue
        last = max(starts)

        def busy(kind: str) -> tuple[int, float]:
            """Calls of ``kind`` that overlapped the burst (up to the last start), and their ms in it."""
            spans = [(max(i["t0"], lo), min(t, last)) for t, k, i in ev if k == kind and i["t0"] < last and t > lo]
            return len(spans), sum(max(0.0, b - a) for a, b in spans) * 1000
        claims = [(t - i["t0"]) * 1000 for t, k, i in ev if k == "claim" and i["got"] and lo <= i["t0"] < last]
        rows.append((n, (last - lo) * 1000, len(claims), sum(claims), max(claims or [0.0]), busy("complete"),
                     busy("sweep"), busy("renew"), busy("purge"), busy("gc")))
    if not rows:
        print("no second with runs in the window")
        return
    print("\n### every second: its last driver start, its claims, what ran beside them (ms after the due instant)\n")
    print("| second | last start | claims | claims ms | longest claim | completions (n, ms) | sweep | "
          "renewal | purge | gc pauses |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, last, k, total, longest, comp, sweep, renew, purge, pauses in sorted(rows, key=lambda r: -r[1]):
        cell = lambda c: f"{c[0]}, {c[1]:.1f}" if c[0] else "-"   # noqa: E731
        print(f"| {n} | {last:.1f} | {k} | {total:.1f} | {longest:.1f} | {cell(comp)} | {cell(sweep)} | "
              f"{cell(renew)} | {cell(purge)} | {cell(pauses)} |")
    lasts = [r[1] for r in rows]
    print(f"\nlast start: median {statistics.median(lasts):.1f} ms, slowest {max(lasts):.1f} ms; "
          f"claims ms: median {statistics.median(r[3] for r in rows):.1f}, in the slowest second "
          f"{max(rows, key=lambda r: r[1])[3]:.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--cap", type=int, default=50)
    p.add_argument("--seconds", type=int, default=4)
    p.add_argument("--second", type=int, default=3, help="which second of the window to show (1 = first)")
    p.add_argument("--every-second", action="store_true", help="a line per second, slowest first")
    args = p.parse_args(argv)
    from mjsched import SchedulingEngine

    with common.BenchDatabase(args.dsn, "lattrace") as db:
        conn = common.connect(db.dsn)
        offset, unc = common.clock_offset(conn)
        engine = SchedulingEngine(db.dsn, max_concurrent_jobs=args.cap, lease_timeout=60.0,
                                  instance_name="trace", completion_batch_window=0.002, max_poll_interval=1.0)
        instrument(engine)
        engine.start_polling()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT extract(epoch FROM date_trunc('second', now()) + interval '2 seconds')::float8")
                first = float(cur.fetchone()[0])
            common.insert_jobs(conn, args.jobs, cron="* * * * * *", driver=common.STAMP_DRIVER,
                               next_run_at=f"to_timestamp({first})")
            time.sleep(max(0.0, first - offset - time.time()) + args.seconds)
        finally:
            engine.stop_polling(wait=True, max_wait=30.0)
            engine.close()
        conn.close()
    print(f"clock offset {offset * 1000:+.3f} +-{unc * 1000:.3f} ms")
    if args.every_second:
        every_second(first, args.seconds, -offset)
    else:
        analyse(first, args.second, -offset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
