"""A/B: the throughput benchmark on two revisions of mjsched, alternating, side by side.

    python -m bench.ab BASE [HEAD] [--rounds 4] [--jobs 8000] [--engines 4] [--dsn DSN]
    python -m bench.ab BASE [HEAD] --latency [--rounds 6] [--seconds 30]

Each revision is checked out into a temporary git worktree (HEAD defaults to the
working tree itself). The rounds alternate which revision runs first, since a run
leaves the server busier for the next (autovacuum, checkpoints): on this two-core
machine the second of a pair measured up to 15 % slower whatever it was. Prints
every run, then the means and the ratios HEAD/BASE of executions/s and of engine
and PostgreSQL CPU per 1,000 executions, and the median (and range) of the same ratio
taken within each round: the machine's speed can drift by 2x over a session (a shared
host), and a round's two runs, next to each other, see the least of it. Numbers are
printed, never asserted.

``--latency`` runs ``bench.latency``'s target configuration instead (200 per-second jobs,
one engine, cap 50) and compares claim p99, driver-start p50 and p99 as differences in ms
(head - base), per round and their median: a p99 of one 30 s window moved by 10-20 ms
between identical runs on this machine, so one pair says little and the median of
several says more.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*\S+\s*\|\s*[\d,]+\s*\|\s*([\d,]+)\s*\|\s*[\d.]+\s*\|\s*[\d.]+\s*\|"
                 r"\s*[\d.]+\s*\|\s*([\d.,]+)\s*\|\s*([\d.,]+)\s*\|")   # CPU: "95.0" below 100, "1,020" above


def result_row(out: str, engines: int) -> tuple[float, float, float] | None:
    """(executions/s, engine CPU ms per 1k, PostgreSQL CPU ms per 1k) from a throughput table."""
    for line in out.splitlines():
        m = ROW.match(line)
        if m and int(m.group(1)) == engines:
            rate, engine_cpu, pg_cpu = (float(m.group(i).replace(",", "")) for i in (2, 3, 4))
            return rate, engine_cpu, pg_cpu
    return None


LATENCY_ROW = "1 x cap 50"     # bench.latency's target configuration
LATENCY_NAMES = ("claim p99 ms", "driver start p50 ms", "driver start p99 ms")


def latency_row(out: str) -> tuple[float, float, float] | None:
    """(claim p99, driver-start p50, driver-start p99) in ms from a bench.latency table."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 12 and cells[0] == LATENCY_ROW:
            try:
                return float(cells[6]), float(cells[8]), float(cells[10])
            except ValueError:
                return None
    return None


def run_once(tree: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """One run of ``tree``: its result_row (throughput) or latency_row (``--latency``)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if args.latency:
        cmd = ["bench.latency", "--configs", "1x50", "--seconds", str(args.seconds)]
    else:
        cmd = ["bench.throughput", "--engines", str(args.engines), "--jobs", str(args.jobs)]
    out = subprocess.run([sys.executable, "-m", *cmd, "--dsn", args.dsn],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=600).stdout
    row = latency_row(out) if args.latency else result_row(out, args.engines)
    if row is None:
        raise RuntimeError(f"no result row in the output of {' '.join(cmd)} in {tree}:\n{out[-2000:]}")
    return row


def describe(row: tuple[float, float, float], latency: bool) -> str:
    if latency:
        return ", ".join(f"{name} {value:.1f}" for name, value in zip(LATENCY_NAMES, row))
    return f"{row[0]:,.0f} exec/s, engine {row[1]:.0f} ms/1k, PostgreSQL {row[2]:.0f} ms/1k"


def summary(results: dict[str, list[tuple[float, float, float]]], latency: bool) -> list[str]:
    """The table's lines: means, and per round the ratio head/base (throughput) or the
    difference head - base in ms (latency), as median (min-max)."""
    means = {k: [statistics.mean(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    names = LATENCY_NAMES if latency else ("executions/s", "engine CPU ms per 1k exec",
                                           "PostgreSQL CPU ms per 1k exec")
    compare = "head - base" if latency else "head/base"
    lines = [f"| measure | base | head | {compare} | per round: median (min-max) |", "|---|---|---|---|---|"]
    # The two runs of a round are minutes apart at most; the machine's speed can drift 2x over
    # a session (a shared host), which the ratio of means mixes in and a round's does not.
    pairs = list(zip(results["base"], results["head"]))
    for i, name in enumerate(names):
        if latency:
            per_round = [h[i] - b[i] for b, h in pairs]
            whole = f"{means['head'][i] - means['base'][i]:+.1f}"
            spread = f"{statistics.median(per_round):+.1f} ({min(per_round):+.1f} to {max(per_round):+.1f})"
            lines.append(f"| {name} | {means['base'][i]:.1f} | {means['head'][i]:.1f} | {whole} | {spread} |")
            continue
        per_round = [h[i] / b[i] for b, h in pairs]
        lines.append(f"| {name} | {means['base'][i]:,.0f} | {means['head'][i]:,.0f} | "
                     f"{means['head'][i] / means['base'][i]:.2f} | {statistics.median(per_round):.2f} "
                     f"({min(per_round):.2f}-{max(per_round):.2f}) |")
    return lines


@contextlib.contextmanager
def checked_out(base: str, head: str | None, tmp: str) -> Iterator[dict[str, Path]]:
    """{"base": tree, "head": tree}: each revision in a git worktree under ``tmp`` (removed on
    the way out), the working tree itself for a ``head`` of None."""
    trees: dict[str, Path] = {}
    try:
        for label, rev in (("base", base), ("head", head)):
            if rev is None:
                trees[label] = ROOT
                continue
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(Path(tmp) / label), rev],
                           check=True)
            trees[label] = Path(tmp) / label
        yield trees
    finally:
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base")
    p.add_argument("head", nargs="?", default=None, help="a revision; default: the working tree")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--jobs", type=int, default=8000)
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--latency", action="store_true",
                   help="compare bench.latency's target configuration (1 engine, cap 50) instead")
    p.add_argument("--seconds", type=int, default=30, help="--latency: the window of each run")
    p.add_argument("--dsn", default=os.environ.get("MJSCHED_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mjsched-ab-") as tmp, checked_out(args.base, args.head, tmp) as trees:
        results: dict[str, list[tuple[float, float, float]]] = {"base": [], "head": []}
        for r in range(args.rounds):
            for label in (("base", "head") if r % 2 == 0 else ("head", "base")):
                result = run_once(trees[label], args)
                results[label].append(result)
                print(f"round {r + 1} {label}: {describe(result, args.latency)}", flush=True)
    what = (f"bench.latency 1 x cap 50, {args.seconds} s windows" if args.latency
            else f"{args.engines} engines x {args.jobs} jobs")
    print(f"\n{what}, {args.rounds} alternating rounds (base {args.base}, head {args.head or 'working tree'})")
    print("\n".join(summary(results, args.latency)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
