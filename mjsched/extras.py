"""How to install an optional extra, worded for where this mjsched came from.

``pip install 'mjsched[web]'`` works only where a package index has mjsched; from a clone of
the repository (issue 35 item 7) it finds no distribution, and the command that works is
``pip install '.[web]'`` in the clone (``-e`` for an editable install). The hints in
mjsched's own errors say the one that works here: imported from a checkout (an editable
install, or PYTHONPATH), the ``setup.py`` beside the package says so; installed, what pip
recorded of where from (``direct_url.json``, PEP 610) does.
"""
from __future__ import annotations

import json
import os
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

PACKAGE_DIR = Path(__file__).resolve().parent


def _source_checkout() -> tuple[Path, bool] | None:
    """(the checkout this mjsched comes from, editable?), or None for an index install."""
    checkout = PACKAGE_DIR.parent
    if (checkout / "setup.py").exists() and (checkout / "sql").is_dir():
        return checkout, True               # imported from a checkout: editable, or PYTHONPATH
    try:                                    # installed: what pip recorded of where from
        recorded = metadata.distribution("mjsched").read_text("direct_url.json")
        info = json.loads(recorded or "{}")
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return None
    url = urlsplit(str(info.get("url", "")))
    if url.scheme == "file" and "dir_info" in info:
        path = Path(unquote(url.path))
        if (path / "setup.py").exists() or (path / "pyproject.toml").exists():
            return path, bool(info["dir_info"].get("editable"))
    return None


def install_command(extra: str) -> str:
    """The pip command that installs ``extra`` here: ``pip install 'mjsched[web]'`` from a
    package index, ``pip install -e '.[web]'`` (in the checkout, named when it is not the
    current directory) for one installed from a clone."""
    found = _source_checkout()
    if found is None:
        return f"pip install 'mjsched[{extra}]'"
    checkout, editable = found
    flag = "-e " if editable else ""
    try:
        here = Path(os.getcwd()).resolve() == checkout.resolve()
    except OSError:
        here = False
    return f"pip install {flag}{shlex.quote(f'.[{extra}]' if here else f'{checkout}[{extra}]')}"
