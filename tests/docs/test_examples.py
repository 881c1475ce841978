"""Every Python example in the README and the docs runs here, against a real database.

The ```python blocks of one page run in order in one namespace, as a reader would paste them:
``DSN`` (and the placeholder ``postgresql://app@db.internal/app``) is a fresh test database;
``engine`` is an engine on it when a block uses one it did not create; ``app`` a Flask
application and ``urlpatterns``/``path`` a Django URL list, for the mounting examples. Blocks
of ``>>>`` lines run as doctests. A block that cannot run (a signature listing, code that
needs your Celery app) carries, on the line above it, ``<!-- example: not run: WHY -->``, and
WHY must name what covers it instead.
"""
from __future__ import annotations

import doctest
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER_DSN = "postgresql://app@db.internal/app"
NOT_RUN = re.compile(r"<!--\s*example:\s*not run:\s*(?P<why>.+?)\s*-->")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str
    not_run: str | None


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def python_blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() in ("```python", "```pycon", "```py"):
            start = i
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            marker = NOT_RUN.search(lines[start - 1]) if start else None
            yield Block(str(path.relative_to(REPO)), start + 1, "\n".join(body) + "\n",
                        marker["why"] if marker else None)
        i += 1


def _flask_app() -> Any:
    flask = pytest.importorskip("flask")
    return flask.Flask("docs-example")


def _django_path() -> Any:
    pytest.importorskip("django")
    from django.conf import settings

    if not settings.configured:
        settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="docs-example")
    from django.urls import path
    return path


def _run_page(blocks: list[Block], dsn: str) -> None:
    import mjsched

    namespace: dict[str, Any] = {"__name__": "docs_example", "DSN": dsn, "dsn": dsn, "mjsched": mjsched,
                                 "datetime": datetime, "timezone": timezone, "timedelta": timedelta}
    opened: list[Any] = []
    try:
        for block in blocks:
            code = block.code.replace(PLACEHOLDER_DSN, dsn)
            if re.search(r"\bengine\b", code) and "engine" not in namespace and "engine =" not in code:
                namespace["engine"] = mjsched.SchedulingEngine(dsn, lease_timeout=30)
                opened.append(namespace["engine"])
            if re.search(r"\bapp\.wsgi_app\b", code) and "app" not in namespace:
                namespace["app"] = _flask_app()
            if "urlpatterns" in code and "urlpatterns" not in namespace:
                namespace["urlpatterns"], namespace["path"] = [], _django_path()
            where = f"{block.page}:{block.line}"
            if code.lstrip().startswith(">>>"):
                test = doctest.DocTestParser().get_doctest(code, namespace, where, block.page, block.line)
                runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
                runner.run(test)
                assert runner.failures == 0, f"doctest at {where} failed (see the output above)"
            else:
                exec(compile(code, where, "exec"), namespace)   # noqa: S102 - the docs' own examples
            if isinstance(namespace.get("engine"), mjsched.SchedulingEngine) and namespace["engine"] not in opened:
                opened.append(namespace["engine"])
    finally:
        for engine in opened:
            engine.close()
        for name in ("metrics", "dashboard"):
            closer = getattr(namespace.get(name), "close", None)
            if callable(closer):
                closer()


PAGES = [p for p in pages() if any(True for _ in python_blocks(p))]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_the_python_examples_of_a_page_run(page: Path, pg_dsn: str) -> None:
    blocks = [b for b in python_blocks(page) if b.not_run is None]
    _run_page(blocks, pg_dsn)


def test_the_readme_examples_run_again_as_a_restart_would(pg_dsn: str) -> None:
    """An application runs its start-up code at every start: the README's quick start, pasted
    as it is, must run a second time on the same database (issue 35: its create_job raised
    JobNameTaken at the first restart). The later blocks are an operator's one-off steps
    (pause, forced run), not start-up code."""
    quick_start = next(b for b in python_blocks(REPO / "README.md") if b.not_run is None)
    assert "start_polling()" in quick_start.code, "the README's first example is no longer the quick start"
    _run_page([quick_start], pg_dsn)
    _run_page([quick_start], pg_dsn)


def test_every_example_runs_or_says_what_covers_it() -> None:
    blocks = [b for p in pages() for b in python_blocks(p)]
    skipped = [b for b in blocks if b.not_run is not None]
    assert len(blocks) - len(skipped) >= 5, "the docs lost their examples"
    for b in skipped:
        assert re.search(r"tests/|test_", b.not_run), f"{b.page}:{b.line}: say which test covers it: {b.not_run!r}"
