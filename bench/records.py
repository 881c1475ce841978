"""Records made on every run's path: their construction, as built now and as plain frozen dataclasses.

Each claimed run builds a Claim (from the claim's row), its JobRun record (the driver's
``context.run``) and a Completion (its end), and reads four enum columns of its Job. The
rows below time each as mjsched builds it (``mjsched.frozen.quick_init``, the enum lookup of
``mjsched.models``) against a frozen dataclass with the same fields and defaults built by the
dataclasses module (and ``Enum(value)``), alternating the two in rounds, in one process, and
print the medians side by side with their ratio. No database. Numbers are printed, never asserted.

    python -m bench.records [--quick] [--rounds R] [--number N]
"""
from __future__ import annotations

import dataclasses
import statistics
import timeit
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from mjsched.backends.base import Completion
from mjsched.models import Claim, ConcurrencyMode, JobRun, JobStatus, MissedRunPolicy, RunStatus, enum_member

from . import common


def _plain_twin(cls: type) -> type:
    """A frozen dataclass with ``cls``'s fields and defaults, built by the dataclasses module."""
    fields = []
    for f in dataclasses.fields(cls):
        spec: Any = dataclasses.field(default=f.default) if f.default is not dataclasses.MISSING else \
            dataclasses.field(default_factory=f.default_factory) if f.default_factory is not dataclasses.MISSING \
            else dataclasses.field()
        fields.append((f.name, f.type, spec))
    return dataclasses.make_dataclass(f"Plain{cls.__name__}", fields, frozen=True)


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(what, as mjsched builds it, as the plain dataclass would), one per record."""
    now = datetime.now(timezone.utc)
    claim = dict(job_id="j", run_id="r", lock_token="t", scheduled_for=now, db_now=now, from_queue=False)
    record = dict(id="r", scheduled_job_id="j", scheduled_for=now, status=RunStatus.RUNNING, success=None,
                  error_message=None, details=None, queued_at=None, started_at=now, completed_at=None,
                  duration_ms=None, executed_by_instance="e", lock_token="t", lease_expires_at=None,
                  parameters=None, attempt=1)
    end: tuple[Any, ...] = ("r", "t", "Completed", None, None, now)
    end_kw = dict(guard=True, expected_next_run_at=now, retry_in=None)
    plain_claim, plain_record, plain_end = _plain_twin(Claim), _plain_twin(JobRun), _plain_twin(Completion)

    def enums_now() -> Any:
        return (enum_member(JobStatus, "Active"), enum_member(ConcurrencyMode, "Skip"),
                enum_member(MissedRunPolicy, "RunOnce"), enum_member(RunStatus, "Completed"))

    def enums_plain() -> Any:
        return JobStatus("Active"), ConcurrencyMode("Skip"), MissedRunPolicy("RunOnce"), RunStatus("Completed")

    return [
        ("Claim (6 fields)", lambda: Claim(**claim), lambda: plain_claim(**claim)),
        ("JobRun (16 fields)", lambda: JobRun(**record), lambda: plain_record(**record)),
        ("Completion (9 fields)", lambda: Completion(*end, **end_kw), lambda: plain_end(*end, **end_kw)),
        ("4 enum columns", enums_now, enums_plain),
    ]


def measure(rounds: int, number: int) -> list[list[Any]]:
    rows = []
    for what, now_fn, plain_fn in cases():
        ours: list[float] = []
        theirs: list[float] = []
        for r in range(rounds):
            pair = ((ours, now_fn), (theirs, plain_fn)) if r % 2 == 0 else ((theirs, plain_fn), (ours, now_fn))
            for sink, fn in pair:
                sink.append(timeit.timeit(fn, number=number) / number * 1e6)
        a, b = statistics.median(ours), statistics.median(theirs)
        rows.append([what, f"{b:.2f}", f"{a:.2f}", f"{a / b:.2f}"])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 7; quick 3)")
    p.add_argument("--number", type=int, default=None, help="constructions per round (default 200000; quick 20000)")
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    number = args.number or (20000 if args.quick else 200000)
    common.print_table("records: construction per run, as built now vs plain frozen dataclasses",
                       ["record", "plain dataclass us", "mjsched us", "ratio"], measure(rounds, number),
                       [f"Median of {rounds} alternating rounds of {number:,} constructions each, one process. "
                        "A claimed run builds one of each record and reads the 4 enum columns of its Job."])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
