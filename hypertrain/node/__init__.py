"""hypertrain-node: the volunteer compute node (see :mod:`hypertrain.node.main`)."""
