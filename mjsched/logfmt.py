"""Log records as JSON lines, for ``mjsched run --json`` and log shippers; secrets masked."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

from .redaction import redact


class JsonLinesFormatter(logging.Formatter):
    """One JSON object a line (``mjsched run --json``): time, level, logger, message and the
    record's structured fields (``action``, ``job_id``, ``status``, ...), for log shippers."""

    _STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in self._STANDARD and not k.startswith("_")})
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(redact(out), default=str)
