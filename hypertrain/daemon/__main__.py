"""``python -m hypertrain.daemon``: the same as the ``hypertrain-daemon`` console script."""

import sys

from hypertrain.daemon.main import main

sys.exit(main())
