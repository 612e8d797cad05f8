"""``python -m pipesim.runtime run ...``: the pipesim command line, as an entry point
torchrun can start (``torchrun --nproc-per-node 4 -m pipesim.runtime run ...``)."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main())
