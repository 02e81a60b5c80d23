"""The coordinator's web room: the only modules of hypertrain that import quart or quart-trio.

A route is *read -> check -> one transaction -> publish -> answer*: it reads and parses the
body (:mod:`.http`), checks the caller (:mod:`.auth`), runs one transaction function of
:mod:`hypertrain.coordinator.flows` through ``ctx.db``, publishes what changed and answers.

==================  ===============================================================
``app``             ``create_app(ctx, parts)`` and :data:`~.app.ROUTE_MODULES`
``http``            body reading (413 before parsing), JSON answers, error mapping
``auth``            ``require_admin`` / ``require_worker`` / ``require_internal``
``system``          ``/version``, ``/health``
``beacon``          ``/v1/beacon/*``, ``POST /v1/admin/beacon``
``events``          ``GET /v1/events`` (server-sent events)
``runs``            run lifecycle (admin) and the public run and round views
``miner``           accept, commit, leaves, uploads, delta
``objects``         object downloads, granted uploads, admin uploads, start states
``datasets``        a run's dataset (register, read)
``aggregator``      an external aggregator's inputs, round opening and tape
``compute``         the compute network's node routes, status, steps and benchmark
``checkpoints``     published checkpoints: the list, their files, the objects a replay reads
``routedoc``        ``add_route``: a route added with its declaration (body, answers, errors)
``openapi``         ``GET /openapi.json``, built from the URL map and those declarations
==================  ===============================================================
"""
