"""Reading the command's TOML files (settings, declared jobs): an error names the file, and for
a syntax error the line and column (``jobs.toml is not valid TOML: line 3, column 12: ...``)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$|\s*\(at end of document\)$")


class InvalidToml(ConfigurationError):
    """A TOML file that cannot be read or parsed. ``path``, and ``line`` and ``column`` (1-based)
    when the parser said where."""

    def __init__(self, path: str, reason: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(path, None, reason)
        self.path, self.line, self.column = path, line, column
        self.args = (f"{path} {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


def read(path: str | Path) -> dict[str, Any]:
    """The document of the TOML file at ``path`` (``~`` expanded), or InvalidToml."""
    where = str(path)
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidToml(where, f"cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidToml(where, f"is not UTF-8 text: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _AT.search(message)
        if at is None:
            raise InvalidToml(where, f"is not valid TOML: {message}") from None
        if at.group(1):
            line, column = int(at.group(1)), int(at.group(2))
        else:       # at the end of the document: its last line, past its last character
            lines = text.split("\n")
            line, column = len(lines), len(lines[-1]) + 1
        raise InvalidToml(where, f"is not valid TOML: line {line}, column {column}: {message[:at.start()]}",
                          line, column) from None
