"""Retry policies: how many attempts a tick gets, and how long to wait between them.

A Failed or Timeout run of a tick is retried as a new run of the same tick (its
``attempt`` one higher), due ``min(max_delay, initial_delay * factor ** (attempt - 1))``
seconds after the failed attempt ended, spread by ``jitter`` (a fraction: 0.1 draws the
delay from [0.9, 1.1] of it) so that jobs failing together do not retry together. The
database records the next attempt in the same transaction as the failure (README
"Retries"); this module only decides the numbers.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import ConfigurationError

MAX_ATTEMPTS = 100            # the schemas' CHECK on scheduled_job.retry_max_attempts and run.attempt
MAX_DELAY_SECONDS = 31_536_000.0   # one year, like every duration a row may hold

COLUMNS = ("retry_max_attempts", "retry_initial_delay", "retry_factor", "retry_max_delay", "retry_jitter")


def _number(field: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise ConfigurationError(field, value, "must be a finite number")
    if not low <= value <= high:
        raise ConfigurationError(field, value, f"must be between {low:g} and {high:g}")
    return float(value)


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first run: 3 means the first run and up to two retries
    (1 means no retry, which also overrides a driver's default). Delays are seconds."""

    max_attempts: int = 3
    initial_delay: float = 30.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            raise ConfigurationError("retry.max_attempts", self.max_attempts,
                                     f"must be an integer between 1 and {MAX_ATTEMPTS}")
        object.__setattr__(self, "initial_delay",
                           _number("retry.initial_delay", self.initial_delay, 0.0, MAX_DELAY_SECONDS))
        object.__setattr__(self, "factor", _number("retry.factor", self.factor, 1.0, 100.0))
        object.__setattr__(self, "max_delay", _number("retry.max_delay", self.max_delay, 0.0, MAX_DELAY_SECONDS))
        object.__setattr__(self, "jitter", _number("retry.jitter", self.jitter, 0.0, 1.0))
        if self.max_delay < self.initial_delay:
            raise ConfigurationError("retry.max_delay", self.max_delay,
                                     f"must be at least initial_delay ({self.initial_delay:g})")

    def base_delay(self, attempt: int) -> float:
        """Seconds before the attempt after ``attempt`` (1 for the first run), before jitter."""
        exponent = max(0, attempt - 1)
        try:
            delay = self.initial_delay * self.factor ** exponent
        except OverflowError:
            delay = self.max_delay
        return min(self.max_delay, delay)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """``base_delay(attempt)`` spread by ``jitter``: uniform in [1 - jitter, 1 + jitter] of it,
        capped at one year (what the completion accepts)."""
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        return min(MAX_DELAY_SECONDS, max(0.0, self.base_delay(attempt) * (1.0 + spread)))

    def retries_left(self, attempt: int) -> bool:
        """Whether an attempt follows a failed ``attempt``."""
        return attempt < self.max_attempts

    def to_fields(self) -> dict[str, Any]:
        """The job columns that store it."""
        return dict(zip(COLUMNS, (self.max_attempts, self.initial_delay, self.factor, self.max_delay,
                                  self.jitter)))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "RetryPolicy | None":
        """The policy a job row stores, or None when its columns are NULL."""
        if row.get("retry_max_attempts") is None:
            return None
        return cls(int(row["retry_max_attempts"]), float(row["retry_initial_delay"]), float(row["retry_factor"]),
                   float(row["retry_max_delay"]), float(row["retry_jitter"]))


def policy(value: Any, field: str = "retry") -> RetryPolicy | None:
    """A job's ``retry=`` argument: a RetryPolicy, a mapping of its fields (TOML, JSON), or None."""
    if value is None or isinstance(value, RetryPolicy):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"max_attempts", "initial_delay", "factor", "max_delay", "jitter"}
        if unknown:
            raise ConfigurationError(f"{field}.{sorted(unknown)[0]}", value[sorted(unknown)[0]],
                                     "unknown retry field; known: max_attempts, initial_delay, factor, "
                                     "max_delay, jitter")
        return RetryPolicy(**dict(value))
    raise ConfigurationError(field, value, "must be a mjsched.RetryPolicy, a mapping of its fields, or None")


def parse_spec(text: str, field: str = "--retry") -> RetryPolicy:
    """``MAX_ATTEMPTS[,INITIAL_DELAY[,FACTOR[,MAX_DELAY[,JITTER]]]]`` (seconds), the rest as
    RetryPolicy's defaults: "3" or "5,60,2,3600,0.1". For the command line and config files."""
    parts = [p.strip() for p in str(text).split(",")]
    if not 1 <= len(parts) <= 5 or not all(parts):
        raise ConfigurationError(field, text, "must be MAX_ATTEMPTS[,INITIAL_DELAY[,FACTOR[,MAX_DELAY[,JITTER]]]], "
                                              "e.g. 3 or 5,60,2,3600,0.1")
    try:
        attempts = int(parts[0])
        numbers = [float(p) for p in parts[1:]]
    except ValueError:
        raise ConfigurationError(field, text, "must hold numbers: MAX_ATTEMPTS[,INITIAL_DELAY[,FACTOR"
                                              "[,MAX_DELAY[,JITTER]]]]") from None
    names = ("initial_delay", "factor", "max_delay", "jitter")
    values: dict[str, Any] = dict(zip(names, numbers))
    if "max_delay" not in values:   # a larger initial delay than the default cap raises the cap with it
        values["max_delay"] = max(RetryPolicy.max_delay, values.get("initial_delay", 0.0))
    return RetryPolicy(max_attempts=attempts, **values)
