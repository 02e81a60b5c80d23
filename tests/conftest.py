"""Suite-wide fixtures. Package-specific fixtures live in each tests/<package>/conftest.py."""
