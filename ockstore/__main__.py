"""``python -m ockstore``: the same command as the ``ockstore`` console script (see ockstore/cli.py)."""

import sys

from .cli import main

sys.exit(main())
