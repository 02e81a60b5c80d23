"""The SQL of the coordinator's tables, one module per table group (migrations in
:mod:`hypertrain.store`): plain functions of a ``sqlite3.Connection``, no trio, quart or httpx.

============  =================================================================
``runs``      ``runs``, ``roster``, ``seen`` (envelope replay keys)
``rounds``    ``rounds`` (and each round's ``miners`` rows), the derived round states
``miners``    ``miners`` (what each miner posted), ``leaves``, ``upload_grants``,
              ``round_states`` (published start states)
``scoring``   ``scoring_inputs`` (a run's shared scoring objects), ``scoring_outbox``
``private``   ``private_objects``: objects served to the admin only
============  =================================================================
"""
