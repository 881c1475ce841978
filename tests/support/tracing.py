"""One OpenTelemetry SDK tracer provider per test process, exporting to memory while a test
that asks for it runs.

OpenTelemetry lets a process set its global tracer provider once, so the first test that
asks installs it; spans are kept only between ``memory_exporter()`` and ``stop()`` (the
fixtures' teardown), so the tests that run later in the same process keep nothing."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

_EXPORTER: Any = None
_SWITCH: Any = None


def memory_exporter() -> Any:
    """The process's in-memory exporter, cleared and switched on, installing the provider
    the first time; skips the test where the SDK is not installed."""
    global _EXPORTER, _SWITCH
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed (the `test` extra has it)")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class Switch(SpanProcessor):
        on = False

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def on_end(self, span: Any) -> None:
            if self.on:
                self.inner.on_end(span)

    if _EXPORTER is None:
        _EXPORTER = InMemorySpanExporter()
        _SWITCH = Switch(SimpleSpanProcessor(_EXPORTER))
        provider = TracerProvider()
        provider.add_span_processor(_SWITCH)
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _SWITCH.on = True
    return _EXPORTER


def stop() -> None:
    if _SWITCH is not None:
        _SWITCH.on = False
        _EXPORTER.clear()


@pytest.fixture
def exporter() -> Iterator[Any]:
    """The in-memory exporter for one test."""
    try:
        yield memory_exporter()
    finally:
        stop()


def run_spans(exporter: Any) -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name == "mjsched.run"]
