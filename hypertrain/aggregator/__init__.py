"""Outer-step math (pure), event tapes and their replay (spec/protocol.md section 7), the one
merge step both aggregators run (:mod:`.step`) and the aggregator run from outside the daemon
(:mod:`.remote`, ``hypertrain aggregate``)."""
