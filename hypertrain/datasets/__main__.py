"""``python -m hypertrain.datasets ...``: the same as ``hypertrain datasets ...``."""

import sys

from hypertrain.cli import main

raise SystemExit(main(["datasets", *sys.argv[1:]]))
