"""mjsched benchmarks: ``python -m bench.<name> [--dsn DSN] [--quick]`` or ``bash bench/run.sh``.

Every script creates its own database (``mjsched_bench_*``) on the server named by
the DSN, installs the schema with ``SchedulingEngine(...).install()``, prints a
small table with the ratios measured side by side in the same run, and drops the
database afterwards. Numbers are printed, never asserted. See bench/RESULTS.md.
"""
