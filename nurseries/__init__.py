"""Domain-free Trio building blocks. Nothing in this package imports hypertrain.

Services (``supervise``), retries (``retry``: exponential backoff with full jitter under the
caller's deadline; its pure schedule ``next_delay``), time (``periodic``, the wall clocks),
long polls (``KeyedWaiter``), blocking work (``offload_for``, ``run_inline``), shutdown
(``open_supervisor``, ``cleanup_scope``), children (``run_process``, ``open_lifeline``, and the
warm fork server: ``open_fork_server`` on the Trio side, ``serve_forks`` and ``end_job`` in
the server and its children) and
serving (``serve_asgi``, which guards every app with ``guard_unread_bodies``; a held request's
client disconnect: ``open_disconnect_watch``). Test helpers
live in ``nurseries.testing``.
"""

from nurseries._backoff import DEFAULT_BACKOFF, Backoff, next_delay, parse_retry_after
from nurseries._cleanup import cleanup_scope
from nurseries._clock import FixedClock, SystemClock, VirtualClock, WallClock
from nurseries._disconnect import DisconnectWatch, open_disconnect_watch
from nurseries._forkclient import ForkServer, ForkServerGone, open_fork_server
from nurseries._forkserver import EXIT_JOB_RETURNED, end_job, serve_forks
from nurseries._lifeline import (
    LIFELINE_ENV,
    Lifeline,
    exit_when_lifeline_cut,
    lifeline_from_env,
    open_lifeline,
    wait_lifeline_cut,
)
from nurseries._offload import RunSync, offload_for, run_inline
from nurseries._periodic import Periodic, Tick, periodic
from nurseries._process import REAP_TIMEOUT, Limits, ProcessResult, run_process
from nurseries._retry import GaveUp, Transient, retry
from nurseries._serve import (
    DEFAULT_BACKLOG,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_GRACEFUL_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_LIFESPAN_TIMEOUT,
    DEFAULT_UNREAD_BODY_LIMIT,
    SERVING_GC_THRESHOLDS,
    ASGIApp,
    make_config,
    serve_asgi,
    tune_collector_for_serving,
)
from nurseries._signals import (
    DEFAULT_SHUTDOWN_SIGNALS,
    Supervisor,
    open_supervisor,
    run_until_shutdown,
)
from nurseries._supervise import (
    RestartMode,
    RestartPolicy,
    ServiceGaveUp,
    ServiceReturned,
    ServiceStatistics,
    SupervisedService,
    supervise,
)
from nurseries._unread import guard_unread_bodies
from nurseries._waiter import (
    KeyedWaiter,
    KeyedWaiterStatistics,
    Notified,
    Parked,
    Stopping,
    TimedOut,
    WaitResult,
)

__all__ = [
    "DEFAULT_BACKLOG",
    "DEFAULT_BACKOFF",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_GRACEFUL_TIMEOUT",
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_LIFESPAN_TIMEOUT",
    "DEFAULT_SHUTDOWN_SIGNALS",
    "DEFAULT_UNREAD_BODY_LIMIT",
    "EXIT_JOB_RETURNED",
    "LIFELINE_ENV",
    "REAP_TIMEOUT",
    "SERVING_GC_THRESHOLDS",
    "ASGIApp",
    "Backoff",
    "DisconnectWatch",
    "FixedClock",
    "ForkServer",
    "ForkServerGone",
    "GaveUp",
    "KeyedWaiter",
    "KeyedWaiterStatistics",
    "Lifeline",
    "Limits",
    "Notified",
    "Parked",
    "Periodic",
    "ProcessResult",
    "RestartMode",
    "RestartPolicy",
    "RunSync",
    "ServiceGaveUp",
    "ServiceReturned",
    "ServiceStatistics",
    "Stopping",
    "SupervisedService",
    "Supervisor",
    "SystemClock",
    "Tick",
    "TimedOut",
    "Transient",
    "VirtualClock",
    "WaitResult",
    "WallClock",
    "cleanup_scope",
    "end_job",
    "exit_when_lifeline_cut",
    "guard_unread_bodies",
    "lifeline_from_env",
    "make_config",
    "next_delay",
    "offload_for",
    "open_disconnect_watch",
    "open_fork_server",
    "open_lifeline",
    "open_supervisor",
    "parse_retry_after",
    "periodic",
    "retry",
    "run_inline",
    "run_process",
    "run_until_shutdown",
    "serve_asgi",
    "serve_forks",
    "supervise",
    "tune_collector_for_serving",
    "wait_lifeline_cut",
]
