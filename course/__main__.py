"""``python -m course COMMAND ...``: see :mod:`course.cli`."""
import sys

from course.cli import main

if __name__ == "__main__":
    sys.exit(main())
