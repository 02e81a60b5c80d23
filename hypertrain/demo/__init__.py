"""The local demo network (``hypertrain-daemon --demo``): see :mod:`hypertrain.demo.main`."""
