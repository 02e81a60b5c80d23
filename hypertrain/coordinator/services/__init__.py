"""The coordinator's Trio loops, started by the daemon's services table
(:data:`hypertrain.daemon.services.SERVICES`) or, for :class:`~.runs.RunsService`, subscribed
by the composition root as a beacon observer.

==============  ===================================================================
``runs``        round-state and run events; the round view's assignment cache
``aggregator``  merge each round at ``d_upload`` and open the next
``heldout``     the held-out loss of every theta
``scorefeed``   every uploaded delta becomes scoring steps for the compute network
``reaper``      compute leases expire at their deadlines; ended windows go to the fallback
``fallback``    the fallback evaluator pool scores what the nodes did not settle
==============  ===================================================================
"""
