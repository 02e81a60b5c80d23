"""Outer-step math (pure), event tapes and their replay (spec/protocol.md section 7), the one
merge step both aggregators run (:mod:`.step`), the rollback of rounds ``w`` and ``w + 1``
without faulted miners and its check by anyone (:mod:`.rollback`), and the aggregator run from
outside the daemon (:mod:`.remote`, ``hypertrain aggregate``), which also finalises each round
(:mod:`.remote_final`); checkpoints (:mod:`.checkpoint`) and their model exported for loaders
outside hypertrain (:mod:`.export`, ``hypertrain export``)."""
