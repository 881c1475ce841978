"""The schedule in words and the little pictures: pure functions, no database."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from mjsched.web.humanize import age, bar_chart, cron_in_words, duration, sparkline


@pytest.mark.parametrize("cron, zone, words", [
    ("* * * * *", "UTC", "every minute"),
    ("*/5 * * * *", "UTC", "every 5 minutes"),
    ("0 * * * *", "UTC", "every hour, on the hour"),
    ("15 * * * *", "UTC", "every hour at minute 15"),
    ("30 2 * * *", "UTC", "every day at 02:30"),
    ("0 2 * * *", "Europe/Berlin", "every day at 02:00 (Europe/Berlin)"),
    ("0 9 * * 1-5", "UTC", "on weekdays at 09:00"),
    ("0 9 * * mon-fri", "UTC", "on weekdays at 09:00"),
    ("0 10 * * 0,6", "UTC", "on weekends at 10:00"),
    ("0 7 * * 1", "UTC", "on Monday at 07:00"),
    ("0 7 * * 1,3", "UTC", "on Monday, Wednesday at 07:00"),
    ("0 6 1 * *", "UTC", "on the 1st of every month at 06:00"),
    ("0 6 22 * *", "UTC", "on the 22nd of every month at 06:00"),
    ("0 */6 * * *", "UTC", "every 6 hours at minute 0"),
    ("*/10 * * * * *", "UTC", "every 10 seconds"),
    ("0 30 2 * * *", "UTC", "every day at 02:30"),
    ("@daily", "UTC", "every day at 00:00"),
    ("@hourly", "Europe/Berlin", "every hour, on the hour"),
])
def test_common_schedules_in_words(cron: str, zone: str, words: str) -> None:
    assert cron_in_words(cron, zone) == words


@pytest.mark.parametrize("cron", ["5,35 9-17 * * 1-5", "0 0 1 1 *", "0 0 L * *", "1-5 * * * *", "0 0 1 * 1",
                                  "15 3 * * * *"])
def test_anything_else_falls_back_to_the_expression(cron: str) -> None:
    assert cron_in_words(cron) == cron


def test_durations_and_ages_read_naturally() -> None:
    assert duration(None) == "-"
    assert duration(42) == "42 ms"
    assert duration(1500) == "1.5 s"
    assert duration(185_000) == "3 min 5 s"
    assert duration(2 * 3600_000 + 60_000) == "2 h 1 min"
    now = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
    assert age(now - timedelta(seconds=90), now) == "1 min ago"
    assert age(now - timedelta(seconds=3599.9), now) == "59 min ago"
    assert age(now + timedelta(seconds=5.5), now) == "in 5 s"
    assert age(now - timedelta(hours=3, minutes=5), now) == "3 h 5 min ago"
    assert age(now + timedelta(days=3, hours=2), now) == "in 3 d 2 h"
    assert age(None, now) == "never"


def test_sparkline_and_chart_are_inline_svg_with_escaped_labels() -> None:
    svg = str(sparkline([10, 20, None, 5], label="<x>"))
    assert svg.startswith("<svg") and "polyline" in svg and "&lt;x&gt;" in svg and "<x>" not in svg
    assert "svg" not in str(sparkline([3]))
    chart = str(bar_chart([("<b>", 100, "Completed"), ("t2", 300, "Failed")]))
    assert chart.count("<rect") == 2 and 'class="bad"' in chart and "&lt;b&gt;" in chart
