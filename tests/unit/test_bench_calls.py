"""bench.calls counts every thread of the engine process, and only that process (no database:
a stand-in script with the engine's command line)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.calls import SITECUSTOMIZE, read_counts

SCRIPT = """
import threading

def hot():
    pass

for _ in range(5):
    hot()
worker = threading.Thread(target=lambda: [hot() for _ in range(7)])
worker.start()
worker.join()
"""


def run(tmp_path: Path, *argv: str) -> Path:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    script = tmp_path / "stand_in.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"calls-{len(argv)}.prof"
    env = {**os.environ, "PYTHONPATH": str(site), "MJSCHED_BENCH_CALLS_OUT": str(out)}
    subprocess.run([sys.executable, str(script), *argv], env=env, check=True, timeout=60)
    return out


def test_the_engine_process_calls_of_every_thread_are_counted(tmp_path: Path) -> None:
    out = run(tmp_path, "engine", "--instance", "tp1-1")
    calls = read_counts(str(out))
    assert calls["stand_in.py:hot"] == 12          # 5 on the main thread, 7 on another
    assert not [name for name in calls if " at 0x" in name]   # one name per builtin across processes


def test_another_process_is_not_profiled(tmp_path: Path) -> None:
    assert not run(tmp_path, "throughput", "--quick").exists()
