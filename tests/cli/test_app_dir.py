"""The application's modules import from the working directory (issue 35 item 6).

`mjsched jobs import-celery proj.celery:app` run from the project's folder failed with
"No module named 'proj'": an installed console script has only its bin folder first on
sys.path, where `celery -A`, `flask` and `python -m` have the working directory. The commands
run here through such a launcher, never `python -m mjsched` (which would hide the bug);
`--app-dir` still chooses another folder, ahead of the working directory.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mjsched.cli.entry import app_path
from tests.cli.conftest import clean_env

pytestmark = pytest.mark.postgres

# What pip writes as bin/mjsched for the console_scripts entry point mjsched.cli:main.
LAUNCHER = "import sys\nfrom mjsched.cli import main\nsys.exit(main())\n"


def mjsched(tmp_path: Path, cwd: Path, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    launcher = tmp_path / "bin" / "mjsched-launcher.py"
    if not launcher.exists():
        launcher.parent.mkdir()
        launcher.write_text(LAUNCHER)
    done = subprocess.run([sys.executable, str(launcher), *args], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)
    if expect is not None:
        assert done.returncode == expect, f"mjsched {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done


def project(tmp_path: Path, name: str = "project", answer: str = "project") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "tasks_app_dir.py").write_text(f"def work(n):\n    return {{'doubled': n * 2, 'from': {answer!r}}}\n")
    return folder


def add_job(tmp_path: Path, cwd: Path, dsn: str, *extra: str) -> None:
    mjsched(tmp_path, cwd, "jobs", "add", "--dsn", dsn, "--name", "work", "--driver", "python", "--cron",
            "0 3 * * *", "--run-immediately", "--check-import", "--config",
            json.dumps({"callable": "tasks_app_dir:work", "kwargs": {"n": 2}}), *extra)


def test_python_jobs_import_from_the_working_directory(tmp_path: Path, pg_dsn: str) -> None:
    folder = project(tmp_path)
    add_job(tmp_path, folder, pg_dsn)                                  # --check-import imports it
    once = mjsched(tmp_path, folder, "run", "--once", "--timeout", "60", "--dsn", pg_dsn, "--json")
    assert [r["status"] for r in json.loads(once.stdout)["runs"]] == ["Completed"], once.stdout
    run = json.loads(mjsched(tmp_path, folder, "execute", "work", "--dsn", pg_dsn, "--json").stdout)
    assert run["status"] == "Completed" and run["details"] == {"doubled": 4, "from": "project"}


def test_app_dir_chooses_another_folder_ahead_of_the_working_directory(tmp_path: Path, pg_dsn: str) -> None:
    here, there = project(tmp_path, "here", "here"), project(tmp_path, "there", "there")
    add_job(tmp_path, here, pg_dsn)
    run = json.loads(mjsched(tmp_path, here, "execute", "work", "--dsn", pg_dsn, "--json",
                             "--app-dir", str(there)).stdout)
    assert run["details"]["from"] == "there"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = mjsched(tmp_path, elsewhere, "execute", "work", "--dsn", pg_dsn, expect=2)
    assert "cannot import module 'tasks_app_dir'" in refused.stderr and "--app-dir" in refused.stderr


def test_import_celery_finds_the_project_package(tmp_path: Path, pg_dsn: str) -> None:
    pytest.importorskip("celery")
    folder = tmp_path / "site"
    (folder / "proj_app_dir").mkdir(parents=True)
    (folder / "proj_app_dir" / "__init__.py").write_text("")
    (folder / "proj_app_dir" / "celery.py").write_text(
        "from celery import Celery\nfrom celery.schedules import crontab\n"
        "app = Celery('proj', broker='redis://127.0.0.1:6379/15')\n"
        "app.conf.beat_schedule = {'nightly': {'task': 'proj.nightly', 'schedule': crontab(minute=0, hour=3)}}\n")
    done = mjsched(tmp_path, folder, "jobs", "import-celery", "proj_app_dir.celery:app", "--dry-run", "--json",
                   "--dsn", pg_dsn)
    assert json.loads(done.stdout)["created"] == ["nightly"], done.stdout


@pytest.mark.parametrize("path, app_dirs, expected", [
    (["/venv/bin", "/usr/lib/python3"], [], ["{cwd}"]),           # a console script: the cwd goes first
    (["{cwd}", "/usr/lib/python3"], [], []),                       # python -m mjsched: there already
    (["", "/usr/lib/python3"], [], []),                            # python -c / the REPL: '' is the cwd
    (["/venv/bin"], ["{tmp}"], ["{tmp}", "{cwd}"]),                # --app-dir first
])
def test_app_path(tmp_path: Path, monkeypatch: Any, path: list[str], app_dirs: list[str],
                  expected: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    cwd, tmp = str(tmp_path.resolve()), str((tmp_path / "apps").resolve())
    fill = lambda items: [item.format(cwd=cwd, tmp=tmp) for item in items]   # noqa: E731
    assert app_path(fill(app_dirs), fill(path)) == fill(expected)
