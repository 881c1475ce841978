"""``python -m mjsched``: the same as the ``mjsched`` command."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
