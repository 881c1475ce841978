"""``mjsched tags list`` and ``mjsched tags limit TAG N|none``: the tags of the jobs, and their
cluster-wide concurrency limits (README "Tags")."""
from __future__ import annotations

from typing import Any

from .context import Context, UsageError
from .terminal import EXIT_OK, table, ts

TAG_HEADERS = ["TAG", "JOBS", "LIMIT", "RUNNING", "WAITING", "LIMIT SET BY"]


def cmd_tags_list(ctx: Context) -> int:
    tags = ctx.engine().tags()
    if ctx.json:
        ctx.emit_json(tags)
    elif not tags:
        ctx.emit("no tags (give jobs tags with `jobs add --tag T` or `jobs edit --tag T`)")
    else:
        ctx.emit(table(TAG_HEADERS, [_row(t) for t in tags]))
    return EXIT_OK


def _row(info: Any) -> list[str]:
    waiting = ", ".join(info.waiting[:3]) + (f" (+{len(info.waiting) - 3})" if len(info.waiting) > 3 else "")
    who = "-" if info.max_running is None else \
        f"{info.set_by}{f' ({info.set_by_user})' if info.set_by_user else ''} at {ts(info.set_at)}"
    return [info.tag, str(info.jobs), "-" if info.max_running is None else str(info.max_running),
            str(info.running), waiting or "-", who]


def cmd_tags_limit(ctx: Context) -> int:
    """``tags limit TAG N``: at most N runs of the tag's jobs at once, across every engine;
    ``none`` lifts it."""
    a = ctx.args
    text = a.limit.strip().lower()
    if text in ("none", "off", "-"):
        limit = None
    else:
        try:
            limit = int(text)
        except ValueError:
            raise UsageError(f"LIMIT={a.limit!r}: a whole number of runs (0 holds every scheduled run of the tag "
                             "back), or none to lift the limit") from None
    engine = ctx.engine()
    engine.set_tag_limit(a.tag, limit)
    if ctx.json:
        ctx.emit_json({"tag": a.tag, "max_running": limit})
    else:
        ctx.emit(f"tag {a.tag!r}: " + ("no limit" if limit is None else
                                        f"at most {limit} run(s) at once across every engine"))
    return EXIT_OK


def waiting_note(engine: Any) -> dict[str, str]:
    """job id -> "waiting for tag T (n/max running)", for the due jobs a tag's limit holds back."""
    notes: dict[str, str] = {}
    for wait in engine.waiting_for_tag():
        notes.setdefault(wait.job_id, f"waiting for tag {wait.tag} ({wait.running}/{wait.max_running} running)")
    return notes

