"""Drivers register by decorator or through the ``mjsched.drivers`` entry-point group."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mjsched
from mjsched.drivers import registry


def test_decorator_registration_and_lookup() -> None:
    @mjsched.register_driver("unit-decorated")
    class Decorated(mjsched.BaseScheduledJob):
        def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
            return mjsched.JobResult()

    assert registry.get_driver("unit-decorated") is Decorated
    assert "unit-decorated" in registry.registered_drivers()


def test_unknown_driver_names_the_value_and_the_known_ones() -> None:
    with pytest.raises(mjsched.UnknownDriver) as info:
        registry.get_driver("no-such-driver")
    assert "no-such-driver" in str(info.value) and "shell" in str(info.value)


def test_non_driver_classes_are_refused() -> None:
    with pytest.raises(mjsched.ConfigurationError):
        mjsched.register_driver("bad")(int)  # type: ignore[arg-type]


def test_entry_point_group_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "ep_driver_pkg.py"
    package.write_text(
        "import mjsched\n"
        "class EpDriver(mjsched.BaseScheduledJob):\n"
        "    def execute(self, context):\n"
        "        return mjsched.JobResult()\n")
    dist = tmp_path / "ep_driver_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-driver-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[mjsched.drivers]\nfrom-entry-point = ep_driver_pkg:EpDriver\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    cls = registry.get_driver("from-entry-point")
    assert cls.__name__ == "EpDriver" and cls.driver_name == "from-entry-point"
    sys.modules.pop("ep_driver_pkg", None)
