"""A python job whose function lives in the script being run (issue 35 item 4).

``python mjs.py`` with ``"callable": "mjs:ping"`` (or the function ``ping`` itself) must call
the ``ping`` of the running script, not import ``mjs`` a second time: that re-ran the whole
script inside the job (a second engine). Each test runs a real script with ``python
script.py`` in a subprocess; the script's top level notes each time it runs (unguarded, as
the issue's was), ``ping`` notes each call, with the pid.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mjsched
from tests.cli.conftest import REPO, clean_env

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

SCRIPT = '''
import json, os, sys
import mjsched

def note(what):
    with open(os.environ["MJS_NOTES"], "a") as notes:
        notes.write(f"{what} {os.getpid()}\\n")

note("top")   # the script's top level: must run once per process

def ping(context=None):
    note("ping")
    return {"pid": os.getpid()}

spec = json.loads(sys.argv[1])
target = ping if spec["callable"] == "<ping>" else spec["callable"]
engine = mjsched.SchedulingEngine(os.environ["MJS_DSN"], lease_timeout=30, max_poll_interval=0.5)
job = engine.ensure_job("ping", "python", every="1h", run_immediately_if_never_run=True,
                        configuration={"callable": target}, isolation=spec.get("isolation"))
if spec["how"] == "execute":
    run = engine.execute_job(job.id)
else:   # the engine's own dispatch, as a polling engine runs a due job
    (run,) = engine.run_due_jobs(timeout=60)
print(json.dumps({"stored": engine.get_job(job.id).configuration["callable"], "status": run.status.value,
                  "error": run.error_message, "pid": os.getpid()}))
engine.close()
'''


def run_script(folder: Path, dsn: str, spec: dict[str, Any], script: str = "mjs.py",
               argv: list[str] | None = None, cwd: Path | None = None) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """Run the script as ``python <script>`` from its folder (or ``python <argv>`` from ``cwd``):
    (what it printed, its notes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / script).write_text(SCRIPT)
    notes = folder / "notes.txt"
    notes.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, *(argv or [script]), json.dumps(spec)], cwd=cwd or folder,
                          env=clean_env(MJS_DSN=dsn, MJS_NOTES=str(notes)), capture_output=True, text=True,
                          timeout=90, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    lines = notes.read_text().split() if notes.exists() else []
    return json.loads(done.stdout.strip().splitlines()[-1]), list(zip(lines[::2], map(int, lines[1::2])))


@pytest.mark.parametrize("callable_, how", [
    ("mjs:ping", "execute"),        # the case: the script's module name
    ("mjs:ping", "due"),
    ("<ping>", "execute"),          # the function itself, as APScheduler users pass it
    ("<ping>", "due"),
    ("__main__:ping", "execute"),
])
def test_the_running_script_is_not_imported_again(pg_dsn: str, tmp_path: Path, callable_: str, how: str) -> None:
    out, notes = run_script(tmp_path, pg_dsn, {"callable": callable_, "how": how})
    assert out["status"] == "Completed", out
    assert notes == [("top", out["pid"]), ("ping", out["pid"])]   # top level once; the job ran, in that process
    assert out["stored"] == ("mjs:ping" if callable_ == "<ping>" else callable_)


def test_process_isolation_refuses_rather_than_run_the_script_in_the_child(pg_dsn: str, tmp_path: Path) -> None:
    out, notes = run_script(tmp_path, pg_dsn, {"callable": "<ping>", "how": "execute", "isolation": "process"})
    assert out["status"] == "Failed"
    assert "mjs.py, the script the engine runs as __main__" in out["error"]
    assert "move the function into a module the script imports" in out["error"]
    assert "isolation='thread'" in out["error"]
    assert notes == [("top", out["pid"])]   # the child ran neither the script's top level nor ping


def test_a_module_run_with_dash_m_is_stored_by_its_module_name(pg_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    out, notes = run_script(tmp_path / "pkg", pg_dsn, {"callable": "<ping>", "how": "execute"}, script="tool.py",
                            argv=["-m", "pkg.tool"], cwd=tmp_path)
    assert out["stored"] == "pkg.tool:ping" and out["status"] == "Completed"
    assert notes == [("top", out["pid"]), ("ping", out["pid"])]


def test_a_script_no_module_name_imports_is_stored_as_main(pg_dsn: str, tmp_path: Path) -> None:
    """``my-job.py`` is no module name: ``__main__:ping`` is stored, which runs in that script's
    process and is refused, saying why, by any other (the CLI here, before a run is recorded)."""
    out, notes = run_script(tmp_path, pg_dsn, {"callable": "<ping>", "how": "execute"}, script="my-job.py")
    assert out["stored"] == "__main__:ping" and out["status"] == "Completed"
    assert notes == [("top", out["pid"]), ("ping", out["pid"])]
    other = subprocess.run([sys.executable, "-m", "mjsched", "execute", "ping", "--dsn", pg_dsn], cwd=tmp_path,
                           env=clean_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert other.returncode == 2 and "only that script's process can call" in other.stderr, other.stderr
    with mjsched.SchedulingEngine(pg_dsn) as engine:
        assert len(engine.list_runs("ping")) == 1


def test_the_stored_path_is_what_the_cli_shows(pg_dsn: str, tmp_path: Path) -> None:
    """What is stored is plain JSON text, whoever reads it."""
    run_script(tmp_path, pg_dsn, {"callable": "<ping>", "how": "execute"})
    shown = subprocess.run([sys.executable, "-m", "mjsched", "jobs", "show", "ping", "--dsn", pg_dsn, "--json"],
                           cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert json.loads(shown.stdout)["configuration"] == {"callable": "mjs:ping"}


# -- a function given where the API takes a configuration or parameters (this process) --------

def job_here() -> str:
    return "job_here"


def other_here() -> str:
    return "other_here"


PATH = f"{__name__}:job_here"


def test_every_writer_takes_the_function(make_engine: Any) -> None:
    engine = make_engine()
    job_id = engine.create_job("made", "python", "0 3 * * *", configuration={"callable": job_here})
    assert engine.get_job(job_id).configuration == {"callable": PATH}
    assert engine.ensure_job("ensured", "python", "0 3 * * *", configuration={"callable": job_here}) \
        .configuration == {"callable": PATH}
    again = engine.ensure_job("ensured", "python", "0 3 * * *", configuration={"callable": job_here})
    assert again.configuration == {"callable": PATH}   # unchanged: the function and its path are the same
    updated = engine.update_job(job_id, configuration={"callable": other_here})
    assert updated.configuration == {"callable": f"{__name__}:other_here"}
    result = engine.sync_jobs([{"name": "synced", "driver": "python", "cron": "0 3 * * *",
                                "configuration": {"callable": job_here}}])
    assert engine.get_job("synced").configuration == {"callable": PATH} and result is not None
    run = engine.execute_job(job_id, parameters={"callable": job_here})
    assert run.status is mjsched.RunStatus.COMPLETED and run.details == {"result": "job_here"}
    assert run.parameters == {"callable": PATH}


def test_what_no_path_names_is_refused_before_anything_is_written(make_engine: Any) -> None:
    engine = make_engine()

    def nested() -> None:
        return None

    for target in (lambda: None, nested, engine.list_jobs):
        with pytest.raises(mjsched.ConfigurationError) as caught:
            engine.create_job("refused", "python", "0 3 * * *", configuration={"callable": target})
        assert caught.value.field == "configuration.callable"
        with pytest.raises(mjsched.ConfigurationError):
            engine.ensure_job("refused", "python", "0 3 * * *", configuration={"callable": target})
    assert engine.list_jobs() == []
    job_id = engine.create_job("kept", "python", "0 3 * * *", configuration={"callable": job_here})
    with pytest.raises(mjsched.ConfigurationError) as caught:
        engine.execute_job(job_id, parameters={"callable": lambda: None})
    assert caught.value.field == "parameters.callable"
    with pytest.raises(mjsched.ConfigurationError):
        engine.update_job(job_id, configuration={"callable": nested})
    assert engine.list_runs(job_id) == [] and engine.get_job(job_id).configuration == {"callable": PATH}
