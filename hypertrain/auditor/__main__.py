"""``python -m hypertrain.auditor`` runs ``hypertrain-auditor``."""

import sys

from hypertrain.auditor.main import main

sys.exit(main())
