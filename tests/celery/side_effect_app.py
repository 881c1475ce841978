"""A Celery app module with an import side effect: the allow-list tests prove it is never imported.

Importing it appends a line to the file MJSCHED_SIDE_EFFECT_FILE names (when set).
"""
from __future__ import annotations

import os

from celery import Celery

_marker = os.environ.get("MJSCHED_SIDE_EFFECT_FILE")
if _marker:
    with open(_marker, "a", encoding="utf-8") as out:
        out.write(f"imported by pid {os.getpid()}\n")

app = Celery("mjsched_side_effect", broker="redis://127.0.0.1:6379/15")
