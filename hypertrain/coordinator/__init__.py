"""The HTTP coordinator: quart-trio app factory, shared context, auth, events, error mapping.

- :class:`CoordinatorSettings` (``settings``): deployment settings (spec section 9.2).
- :class:`Coordinator` (``context``): the state every route closes over; the one beacon ingest
  path (``ingest_beacon``) and :class:`CoordinatorSink` for the in-process pusher.
- ``auth``: :class:`TokenFiles` and ``require_admin/worker/internal``.
- ``http``: ``read_json`` (413 before parsing, strict JSON), ``json_response``, error mapping.
- ``events``: :class:`EventHub` (drop-oldest live feed) behind ``GET /v1/events``.
- ``app``: ``create_app(ctx)``, registering every ``routes_*`` module (import it from
  ``hypertrain.coordinator.app``; not re-exported here, so route modules may import this
  package without a cycle).
"""

from hypertrain.coordinator.auth import (
    Forbidden,
    TokenFiles,
    TokenKind,
    require_admin,
    require_internal,
    require_worker,
)
from hypertrain.coordinator.context import Coordinator, CoordinatorSink
from hypertrain.coordinator.events import EventHub, EventHubStatistics, HubEvent, Subscription
from hypertrain.coordinator.http import json_response, read_body, read_json, stopping_response
from hypertrain.coordinator.settings import CoordinatorSettings

__all__ = [
    "Coordinator",
    "CoordinatorSettings",
    "CoordinatorSink",
    "EventHub",
    "EventHubStatistics",
    "Forbidden",
    "HubEvent",
    "Subscription",
    "TokenFiles",
    "TokenKind",
    "json_response",
    "read_body",
    "read_json",
    "require_admin",
    "require_internal",
    "require_worker",
    "stopping_response",
]
