"""Compatibility path: the demo moved to ``mjsched.cli.demo`` (issue 13). Kept because a demo
database made before the move stores its jobs' callables as ``mjsched.demo:sample_task``."""
from .cli.demo import failing_task, run_demo, sample_task  # noqa: F401
