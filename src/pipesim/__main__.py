"""``python -m pipesim``: the same as the ``pipesim`` command."""

import sys

from .cli import main

sys.exit(main())
