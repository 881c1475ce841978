"""The dashboard's templates and static files ship in the wheel (package_data), and the
``web`` extra names what the package imports."""
from __future__ import annotations

import configparser
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "mjsched" / "web"


def test_every_template_and_static_file_is_package_data() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = [p.strip() for p in cfg["options.package_data"]["mjsched.web"].split(",")]
    shipped = [p.relative_to(WEB).as_posix() for d in ("templates", "static") for p in (WEB / d).iterdir()]
    assert shipped and all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in shipped), (shipped, patterns)
    extra = cfg["options.extras_require"]["web"]
    assert "Werkzeug" in extra and "Jinja2" in extra
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "recursive-include mjsched/web/templates" in manifest and "recursive-include mjsched/web/static" in manifest
