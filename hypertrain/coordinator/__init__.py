"""The daemon's HTTP coordinator, in four rooms (DESIGN.md section 2):

=============  ==================================================================================
``web/``       the only quart importers: ``create_app``, body reading and error mapping, the auth
               guards, one module of routes per audience
``flows/``     one synchronous transaction function per request (sqlite3 only, no trio)
``tables/``    the SQL of the coordinator's tables, one module per table group
``services/``  the Trio loops the daemon's services table (:mod:`hypertrain.daemon.services`)
               starts
=============  ==================================================================================

At the top, shared by all four:

- :class:`CoordinatorSettings` (``settings``): deployment settings (spec section 9.2);
- :class:`Coordinator` (``context``): the state every route and service closes over, and the
  one beacon ingest path (``ingest_beacon``, :class:`CoordinatorSink` for the pusher);
- :class:`TokenFiles` (``tokens``): the admin, worker and internal bearer tokens;
- the hubs: :class:`EventHub` (``events``, the drop-oldest live feed behind ``GET
  /v1/events``), :class:`ComputeHub` (``computehub``, the compute network's wake-ups) and the
  metagraph (``metagraph``).

Nothing here imports quart: import the app factory from :mod:`hypertrain.coordinator.web.app`.
"""

from hypertrain.coordinator.computehub import ComputeHub
from hypertrain.coordinator.context import Coordinator, CoordinatorSink
from hypertrain.coordinator.events import EventHub, EventHubStatistics, HubEvent, Subscription
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.coordinator.tokens import TokenFiles, TokenKind

__all__ = [
    "ComputeHub",
    "Coordinator",
    "CoordinatorSettings",
    "CoordinatorSink",
    "EventHub",
    "EventHubStatistics",
    "HubEvent",
    "Subscription",
    "TokenFiles",
    "TokenKind",
]
