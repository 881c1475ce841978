"""Build script: ships the top-level sql/ tree inside the package as mjsched/sql/."""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithSql(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "mjsched" / "sql"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(HERE / "sql", target, ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))


setup(cmdclass={"build_py": BuildWithSql})
