"""The embedded server's data home when several processes start on it at once (no binaries needed)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from mjsched.cli.embedded import EmbeddedServer


class _CreatedByAnotherProcess(type(Path())):  # type: ignore[misc]
    """A path another process creates just before this one does: the race the test workers hit."""

    def mkdir(self, *args: Any, **kwargs: Any) -> None:
        if not self.exists():
            Path(str(self)).mkdir(mode=0o700)
        super().mkdir(*args, **kwargs)


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mjsched-home-", dir="/tmp"))
    path.chmod(0o755)   # as root the server's user must traverse it
    yield path / "home"
    shutil.rmtree(path, ignore_errors=True)


def test_the_server_directory_made_by_a_concurrent_start_is_reused(home: Path) -> None:
    """Two test workers (or two engines) start on a new home at once: both go on, neither fails.

    CI's fresh-machine run lost 25 tests to ``FileExistsError: .../embedded/pg`` this way.
    """
    server = EmbeddedServer(home)
    server.pgdir = _CreatedByAnotherProcess(server.pgdir)
    server._prepare_home()
    assert server.pgdir.is_dir()
    assert (server.pgdir.stat().st_mode & 0o777) == 0o700
    if server._run_as is not None:   # as root: the server's user owns it, whoever made it
        assert server.pgdir.stat().st_uid == server._run_as.uid
