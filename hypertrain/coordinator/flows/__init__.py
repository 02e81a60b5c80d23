"""The coordinator's flows: one synchronous transaction function per request.

Each function takes a ``sqlite3.Connection`` first and runs inside one ``ctx.db.read`` or
``ctx.db.write``; it raises a :class:`~hypertrain.protocol.errors.ProtocolError` to refuse,
which rolls the whole transaction back. No trio, quart or httpx here (a test in
``tests/test_house_rules.py`` holds this): a flow is tested with a bare connection.

================  ====================================================================
``lifecycle``     create a run, pause and unpause it (opens round 0)
``roundopen``     the one RoundOpen builder (round 0 and round w + 1)
``honeypots``     honeypot commit and reveal
``datasets``      register a run's dataset, read it back
``miner``         accept, commit, leaves, upload grants, delta
``startstate``    publish a round's start state
``aggregation``   the daemon's merge step (inputs, commit) and which rounds are due
``aggregator``    an external aggregator's inputs view and round opening
``taperecord``    record an external aggregator's tape
``heldout``       held-out losses owed and stored; the private holdout
``runview``       the public run views (runs, a run with its rounds, its roster)
``roundview``     the public round view
``compute``       the compute routes' own reads (inputs of a copy, benchmark target)
``scoring``       what the scoring feed reads
``system``        the health check's write
================  ====================================================================
"""
