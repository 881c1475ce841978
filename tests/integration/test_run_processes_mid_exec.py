"""A run's process that is in the middle of an exec when the run ends is still ended.

While a process execs, the kernel shows it with no environment for a moment, so the run's
mark cannot be read from it then: a double-forked grandchild that exec'd just as its run was
cancelled outlived the run (tests/integration/test_orphans.py, once in a clean-clone CI run).
Here the moment is made certain: the first reads of the process's environment come back
empty, as they would mid-exec, and the process must still be ended."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from mjsched import proctree
from tests.support.pg import wait_for
from tests.support.procs import process_alive

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guarantee is Linux's (/proc)")]


@pytest.mark.parametrize("empty_reads", [1, 3])
@pytest.mark.parametrize("how", ["end", "end without grace", "kill"])
def test_a_process_mid_exec_at_the_scan_is_ended_too(monkeypatch: Any, how: str, empty_reads: int) -> None:
    mark = proctree.new_mark()
    orphan = subprocess.Popen(["sleep", "60"], env=proctree.marked_environment(None, mark),
                              start_new_session=True)    # no group or parent the run knows: only its mark
    try:
        real, reads = proctree._carries, {"n": 0}

        def carries(pid: int, wanted: bytes) -> bool | None:
            if pid == orphan.pid:
                reads["n"] += 1
                if reads["n"] <= empty_reads:
                    return None     # what an exec in progress shows
            return real(pid, wanted)

        wait_for(lambda: real(orphan.pid, mark.encode()), timeout=5, message="the sleep carries the mark")
        monkeypatch.setattr(proctree, "_carries", carries)
        run = proctree.RunProcesses(None, mark, since=0)
        if how == "end":
            run.end(grace=2.0)
        elif how == "end without grace":   # a fenced run's (cancel_grace 0): the scans go on in kill()
            run.end(grace=0.0)
        else:
            run.kill()
        orphan.wait(timeout=5)
        assert not process_alive(orphan.pid)
        assert reads["n"] > empty_reads
    finally:
        if orphan.poll() is None:
            os.kill(orphan.pid, 9)
            orphan.wait()
