"""Words and pictures for the pages: a schedule in words, ages, durations, sparklines.

Pure functions of their arguments (no database, no toolkit), so they are tested alone.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Sequence

from markupsafe import Markup, escape

_MACROS = {
    "@yearly": "once a year, on 1 January at 00:00", "@annually": "once a year, on 1 January at 00:00",
    "@monthly": "on the 1st of every month at 00:00", "@weekly": "every Sunday at 00:00",
    "@daily": "every day at 00:00", "@midnight": "every day at 00:00", "@hourly": "every hour, on the hour",
}
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_DAY_NAMES = {n[:3].lower(): i for i, n in enumerate(_DAYS[:7])}
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]
_MONTH_NAMES = {n[:3].lower(): i + 1 for i, n in enumerate(_MONTHS)}


def _int(text: str, names: dict[str, int] | None = None) -> int | None:
    if text.isdigit():
        return int(text)
    if names and text.lower() in names:
        return names[text.lower()]
    return None


def _step(field: str) -> int | None:
    """N for ``*/N`` (or ``0/N``), else None."""
    if "/" in field:
        base, _, step = field.partition("/")
        if base in ("*", "0") and step.isdigit() and int(step) > 0:
            return int(step)
    return None


def _days_of_week(field: str) -> str | None:
    if field == "1-5" or field.lower() == "mon-fri":
        return "on weekdays"
    if field in ("0,6", "6,0", "6-7") or field.lower() in ("sat,sun", "sun,sat"):
        return "on weekends"
    names = []
    for part in field.split(","):
        n = _int(part, _DAY_NAMES)
        if n is None or not 0 <= n <= 7:
            return None
        names.append(_DAYS[n])
    return "on " + ", ".join(names)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def schedule_in_words(job: Any) -> str:
    """A job row's schedule in words, whichever kind: its cron (cron_in_words), 'every 1m30s' or
    'once at <instant in its zone>'."""
    from ..schedules import format_duration

    if job.get("interval_seconds") is not None:
        return f"every {format_duration(job['interval_seconds'])}"
    if job.get("run_at") is not None:
        zone = job.get("timezone") or "UTC"
        try:
            from ..cron import resolve_timezone

            return f"once at {job['run_at'].astimezone(resolve_timezone(zone)).isoformat()} ({zone})"
        except Exception:  # noqa: BLE001 - a zone no engine can use: show the instant as stored
            return f"once at {job['run_at'].isoformat()}"
    return cron_in_words(job.get("cron_expression") or "", job.get("timezone") or "UTC")


def cron_in_words(expression: str, timezone: str = "UTC") -> str:
    """The common cron shapes in words ("every 5 minutes", "every day at 02:30 (Europe/Berlin)");
    anything else is returned as the expression itself, so the page never says something wrong."""
    text = " ".join((expression or "").split())
    zone = "" if timezone in ("UTC", "Etc/UTC", None) else f" ({timezone})"
    if text.lower() in _MACROS:
        return _MACROS[text.lower()] + (zone if text.lower() != "@hourly" else "")
    fields = text.split(" ")
    seconds = None
    if len(fields) == 6:
        seconds, fields = fields[0], fields[1:]
    if len(fields) != 5:
        return text
    if seconds is not None and seconds != "0":
        return _seconds_in_words(seconds, fields) or text
    minute, hour, dom, month, dow = fields
    if month != "*" or (dom != "*" and dow != "*"):
        return text
    if hour == "*" and dom == "*" and dow == "*":
        return _hourly_in_words(minute) or text
    return _daily_in_words(minute, hour, dom, dow, zone) or text


def _seconds_in_words(seconds: str, fields: list[str]) -> str | None:
    """Seconds other than 0 have words only when every other field is ``*``."""
    if fields != ["*"] * 5:
        return None
    if seconds == "*":
        return "every second"
    step = _step(seconds)
    return f"every {step} seconds" if step else None


def _hourly_in_words(minute: str) -> str | None:
    """Every hour (hour, day and weekday all ``*``): by the minute field alone."""
    if minute == "*":
        return "every minute"
    step = _step(minute)
    if step:
        return f"every {step} minutes"
    m = _int(minute)
    if m is not None and 0 <= m <= 59:
        return "every hour, on the hour" if m == 0 else f"every hour at minute {m}"
    return None


def _daily_in_words(minute: str, hour: str, dom: str, dow: str, zone: str) -> str | None:
    """Every few hours, or at one time of day on every day, some weekdays or one day of the month."""
    m, h = _int(minute), _int(hour)
    if m is not None and _step(hour) and dom == "*" and dow == "*":
        step = _step(hour)
        return f"every {step} hours at minute {m}"
    if m is None or h is None or not (0 <= m <= 59 and 0 <= h <= 23):
        return None
    at = f"at {h:02d}:{m:02d}{zone}"
    if dom == "*" and dow == "*":
        return f"every day {at}"
    if dom == "*":
        days = _days_of_week(dow)
        return f"{days} {at}" if days else None
    d = _int(dom)
    if d is not None and 1 <= d <= 31:
        return f"on the {_ordinal(d)} of every month {at}"
    return None


def duration(ms: float | int | None) -> str:
    """``1.2 s``, ``3 min 4 s``, ``2 h 5 min``; ``-`` for None."""
    if ms is None:
        return "-"
    seconds = float(ms) / 1000.0
    if seconds < 1:
        return f"{int(round(seconds * 1000))} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


def span(delta: timedelta | float | None) -> str:
    """A length of time in a few words (seconds or a timedelta)."""
    if delta is None:
        return "-"
    seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
    return duration(abs(seconds) * 1000.0)


def age(when: datetime | None, now: datetime) -> str:
    """``5 min ago`` / ``in 3 s`` relative to ``now`` (the database clock)."""
    if when is None:
        return "never"
    seconds = (now - when).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    words = coarse(abs(seconds))
    return f"{words} ago" if seconds > 0 else f"in {words}"


def coarse(seconds: float) -> str:
    """A length of time to the unit that matters at a glance: ``42 s``, ``17 min``, ``3 h 5 min``, ``4 d 2 h``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 2 * 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def sparkline(values: Sequence[float | int | None], *, width: int = 100, height: int = 20,
              label: str = "durations") -> Markup:
    """An inline SVG polyline of ``values`` (oldest first); empty when fewer than two."""
    points = [float(v) for v in values if v is not None]
    if len(points) < 2:
        return Markup('<span class="muted">-</span>')
    top = max(points) or 1.0
    step = (width - 2) / (len(points) - 1)
    coords = " ".join(f"{1 + i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}"
                      for i, v in enumerate(points))
    return Markup('<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
                  'aria-label="{label}"><polyline fill="none" stroke="currentColor" stroke-width="1.5" '
                  'points="{pts}"/></svg>').format(w=width, h=height, label=label, pts=coords)


def bar_chart(runs: Sequence[tuple[str, float | int | None, str]], *, width: int = 720,
              height: int = 140) -> Markup:
    """An inline SVG bar chart of run durations, oldest left; ``runs`` holds
    (label, duration ms, status); failed runs are drawn in the failure colour."""
    bars = [(label, float(ms), status) for label, ms, status in runs if ms is not None]
    if not bars:
        return Markup('<p class="muted">No finished runs yet.</p>')
    top = max(ms for _, ms, _ in bars) or 1.0
    gap = 2.0
    bar_w = min(24.0, max(1.0, (width - 40 - gap * len(bars)) / len(bars)))
    parts = [Markup('<svg class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
                    'aria-label="run durations">').format(w=width, h=height + 20)]
    parts.append(Markup('<text x="0" y="12" class="axis">{top}</text>').format(top=duration(top)))
    for i, (label, ms, status) in enumerate(bars):
        h = max(1.0, ms / top * (height - 20))
        x = 40 + i * (bar_w + gap)
        css = "ok" if status == "Completed" else "bad"
        parts.append(Markup('<rect class="{css}" x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{bh:.1f}">'
                            '<title>{label}: {d} ({status})</title></rect>').format(
            css=css, x=x, y=height - h, bw=bar_w, bh=h, label=label, d=duration(ms), status=status))
    parts.append(Markup('<line x1="40" y1="{h}" x2="{w}" y2="{h}" class="axis"/></svg>').format(h=height, w=width))
    return Markup("").join(parts)


__all__ = ["age", "bar_chart", "cron_in_words", "duration", "escape", "span", "sparkline"]
