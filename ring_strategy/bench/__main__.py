"""Entry point of ``python -m ring_strategy.bench``."""

import sys

from ring_strategy.bench.cli import main

sys.exit(main())
