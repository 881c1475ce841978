"""Compatibility path: the embedded PostgreSQL moved to ``mjsched.cli.embedded`` (issue 13).
Kept because scripts and test harnesses import ``mjsched.embedded.EmbeddedServer``."""
from .cli.embedded import EmbeddedError, EmbeddedServer, describe_error, find_binaries, is_root  # noqa: F401
