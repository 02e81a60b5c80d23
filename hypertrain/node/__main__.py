"""``python -m hypertrain.node``: the same as ``hypertrain-node``."""

import sys

from hypertrain.node.main import main

sys.exit(main())
