"""The install hints in mjsched's errors say what works where the user is (issue 35 item 7):
``pip install 'mjsched[web]'`` finds no distribution from a clone, which needs ``'.[web]'``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mjsched import extras
from mjsched.extras import install_command

REPO = Path(__file__).resolve().parents[2]


class _Dist:
    def __init__(self, direct_url: dict[str, Any] | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        return json.dumps(self.direct_url) if name == "direct_url.json" and self.direct_url is not None else None


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """mjsched as if installed in site-packages (no checkout beside it), from ``direct_url``."""
    site = tmp_path / "site-packages" / "mjsched"
    site.mkdir(parents=True)
    monkeypatch.setattr(extras, "PACKAGE_DIR", site)

    def install(direct_url: dict[str, Any] | None) -> None:
        monkeypatch.setattr(extras.metadata, "distribution", lambda name: _Dist(direct_url))
    return install


def test_from_this_checkout_the_hint_is_an_editable_install_of_it(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    assert install_command("web") == "pip install -e '.[web]'"
    monkeypatch.chdir(tmp_path)                       # elsewhere: the checkout is named
    assert install_command("embedded") == f"pip install -e '{REPO}[embedded]'"


def test_from_a_package_index_the_hint_names_the_distribution(installed: Any) -> None:
    installed({"url": "https://files.pythonhosted.org/packages/mjsched-1.0-py3-none-any.whl",
               "archive_info": {}})
    assert install_command("web") == "pip install 'mjsched[web]'"
    installed(None)                                   # no direct_url.json: an index install
    assert install_command("metrics") == "pip install 'mjsched[metrics]'"


def test_installed_from_a_clone_the_hint_installs_from_that_clone(installed: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    clone = tmp_path / "my clone"
    clone.mkdir()
    (clone / "setup.py").write_text("")
    installed({"url": clone.as_uri(), "dir_info": {}})
    monkeypatch.chdir(clone)
    assert install_command("web") == "pip install '.[web]'"
    monkeypatch.chdir(tmp_path)
    assert install_command("web") == f"pip install '{clone}[web]'"     # quoted: the path has a space
    installed({"url": clone.as_uri(), "dir_info": {"editable": True}})
    assert install_command("celery") == f"pip install -e '{clone}[celery]'"
    (clone / "setup.py").unlink()                     # the clone is gone: only the index is left
    assert install_command("web") == "pip install 'mjsched[web]'"


def test_the_cli_hint_for_a_missing_extra_works_from_a_clone(tmp_path: Path) -> None:
    """`mjsched dashboard` without Werkzeug, from this checkout: the hint is the clone's command
    (it said pip install 'mjsched[web]', which finds nothing: mjsched is not on PyPI)."""
    code = ("import sys; sys.modules['werkzeug'] = None; from mjsched.cli import main; "
            "sys.exit(main(['--dsn', 'postgresql://nobody@127.0.0.1:1/x', 'dashboard']))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MJSCHED_")}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert "pip install -e '.[web]'" in result.stderr and "mjsched[web]" not in result.stderr, result.stderr


def test_the_docs_give_the_clone_command_beside_the_index_one() -> None:
    """Every ``mjsched[extra]`` in the README and the docs has the command that works from a
    clone (``'.[extra]'``) close by: mjsched is not on a package index yet."""
    import re

    lonely = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = " ".join(path.read_text(encoding="utf-8").split())
        for m in re.finditer(r"mjsched\[(\w+)\]", text):
            near = text[max(0, m.start() - 200):m.end() + 200]
            if f"'.[{m.group(1)}]'" not in near:
                lonely.append(f"{path.relative_to(REPO)}: ...{text[max(0, m.start() - 60):m.end() + 20]}...")
    assert lonely == []
