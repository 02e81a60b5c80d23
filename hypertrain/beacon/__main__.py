"""``python -m hypertrain.beacon ...``: the same as ``hypertrain beacon ...`` (operator guide)."""

import sys

from hypertrain.cli import main

raise SystemExit(main(["beacon", *sys.argv[1:]]))
