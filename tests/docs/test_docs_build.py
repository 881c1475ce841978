"""The documentation site builds with Sphinx, warnings as errors (a broken link, a docstring
autodoc cannot import, a malformed page all fail here)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_build_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="pip install -e '.[test]' (it includes the docs tools)")
    pytest.importorskip("myst_parser")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                             str(REPO / "docs"), str(tmp_path / "html")],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "html" / "reference" / "api.html").read_text().count("SchedulingEngine") > 3
