"""``python -m hypertrain``: the umbrella command line."""

from hypertrain.cli import main

raise SystemExit(main())
