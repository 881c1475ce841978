"""Calls per execution: the engine's Python work per run on two revisions, counted, not timed.

    python -m bench.calls BASE [HEAD] [--jobs 4000,12000] [--dsn DSN]

On this two-core shared machine a timed A/B (``bench.ab``) of the engine's CPU per execution
moves by 15-30 % between two runs of one revision (the engine and PostgreSQL share the cores,
and the host is shared), so a cost of a few per cent cannot be seen in it. This counts it
instead: each revision's ``bench.throughput`` round (one engine, no-op jobs) runs with every
thread of the engine under cProfile, whose counts of function calls hardly depend on the
machine's speed (they move by about 5 per execution from run to run, as the completion batches
differ). Two rounds of different sizes are counted and subtracted, so start-up (imports,
install, the first connections) drops out and what is left is per execution. Prints calls per
execution for both and their ratio, then the functions whose calls per execution grew or
shrank most (a C function counts as a call too, as cProfile sees it). cProfile slows the
engine down several times: its times are not printed, only its counts. Numbers are printed,
never asserted.
"""
from __future__ import annotations

import argparse
import collections
import os
import pstats
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .ab import checked_out

ADDRESS = re.compile(r" at 0x[0-9a-f]+")   # "<built-in method __new__ of type object at 0x7f...>": one name

# Loaded by the engine subprocess (bench.common engine) through PYTHONPATH: a cProfile per
# thread, merged and written at exit to $MJSCHED_BENCH_CALLS_OUT.
SITECUSTOMIZE = '''
import os, sys
if "engine" in sys.argv and "--instance" in sys.argv and os.environ.get("MJSCHED_BENCH_CALLS_OUT"):
    import atexit, cProfile, pstats, threading
    _profiles = [cProfile.Profile()]
    _lock = threading.Lock()

    def _start(*_args):
        profile = cProfile.Profile()
        with _lock:
            _profiles.append(profile)
        profile.enable()   # replaces this hook in the new thread

    threading.setprofile(_start)
    _profiles[0].enable()

    def _dump():
        merged = None
        for profile in _profiles:
            profile.disable()
            profile.create_stats()
            if merged is None:
                merged = pstats.Stats(profile)
            else:
                merged.add(profile)
        merged.dump_stats(os.environ["MJSCHED_BENCH_CALLS_OUT"])

    atexit.register(_dump)
'''


def count(tree: Path, jobs: int, dsn: str, site: str, out: str) -> collections.Counter[str]:
    """Calls per function (``file:name``) of one engine running ``jobs`` no-op jobs."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{site}", "MJSCHED_BENCH_CALLS_OUT": out}
    cmd = [sys.executable, "-m", "bench.throughput", "--quick", "--engines", "1", "--jobs", str(jobs), "--dsn", dsn]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    if not os.path.exists(out):
        raise RuntimeError(f"no profile from {' '.join(cmd)} in {tree}:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    calls = read_counts(out)
    os.unlink(out)
    return calls


def read_counts(path: str) -> collections.Counter[str]:
    """Calls per ``file:function`` in a profile the engine wrote (every thread's, merged)."""
    calls: collections.Counter[str] = collections.Counter()
    for (source, _line, name), (_primitive, total, *_rest) in pstats.Stats(path).stats.items():  # type: ignore[attr-defined]
        calls[f"{os.path.basename(source)}:{ADDRESS.sub('', name)}"] += total
    return calls


def per_execution(tree: Path, sizes: tuple[int, int], dsn: str, site: str, tmp: str) -> dict[str, float]:
    small, large = (count(tree, n, dsn, site, os.path.join(tmp, f"calls-{n}.prof")) for n in sizes)
    span = sizes[1] - sizes[0]
    return {name: (large[name] - small[name]) / span for name in set(small) | set(large)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base")
    p.add_argument("head", nargs="?", default=None, help="a revision; default: the working tree")
    p.add_argument("--jobs", default="4000,12000", help="the two round sizes subtracted (default %(default)s)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--dsn", default=os.environ.get("MJSCHED_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = p.parse_args()
    small, large = sorted(int(x) for x in args.jobs.split(","))
    with tempfile.TemporaryDirectory(prefix="mjsched-calls-") as tmp, checked_out(args.base, args.head, tmp) as trees:
        site = os.path.join(tmp, "site")
        os.mkdir(site)
        Path(site, "sitecustomize.py").write_text(SITECUSTOMIZE)
        calls = {label: per_execution(tree, (small, large), args.dsn, site, tmp) for label, tree in trees.items()}
    base, head = calls["base"], calls["head"]
    total_base, total_head = sum(base.values()), sum(head.values())
    print(f"\n### calls per execution: base {args.base}, head {args.head or 'working tree'} "
          f"(1 engine, no-op jobs, rounds of {small:,} and {large:,} subtracted)\n")
    print("| measure | base | head | head/base |\n|---|---|---|---|")
    print(f"| function calls per execution | {total_base:.0f} | {total_head:.0f} | {total_head / total_base:.2f} |")
    names = set(base) | set(head)
    for title, order in (("grew most", -1), ("shrank most", 1)):
        print(f"\n| function ({title}) | base | head | change |\n|---|---|---|---|")
        for name in sorted(names, key=lambda n: order * (head.get(n, 0.0) - base.get(n, 0.0)))[:args.top]:
            change = head.get(name, 0.0) - base.get(name, 0.0)
            if abs(change) >= 0.05:
                print(f"| {name} | {base.get(name, 0.0):.2f} | {head.get(name, 0.0):.2f} | {change:+.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
