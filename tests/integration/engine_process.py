"""An engine in its own process: polls ``dsn`` for ``seconds``, then drains and exits 0.

    engine_process.py DSN SECONDS NAME [no-alerts]

``no-alerts``: the engine never evaluates deadline alerts, so a test knows which engines did."""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

import mjsched


def main() -> int:
    dsn, seconds, name = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    alerts: dict[str, Any] = {"alert_interval": None} if "no-alerts" in sys.argv[4:] else {}
    logging.basicConfig(level=logging.WARNING, format=f"{name} %(levelname)s %(name)s %(message)s")
    engine = mjsched.SchedulingEngine(dsn, max_concurrent_jobs=20, lease_timeout=10, instance_name=name,
                                      max_poll_interval=1.0, **alerts)
    engine.start_polling()
    time.sleep(seconds)   # the engine's lifetime, not a synchronisation
    engine.stop_polling(wait=True, max_wait=10)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
