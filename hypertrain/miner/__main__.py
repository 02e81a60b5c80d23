"""``python -m hypertrain.miner``: the same as ``hypertrain-miner``."""

import sys

from hypertrain.miner.main import main

sys.exit(main())
