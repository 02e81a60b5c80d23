"""The demo's DiLoCo settings, as bench/parity.py measured them (docs/results/parity.md).

The demo runs the CPU test-mode manifest
(:func:`hypertrain.protocol.testmode.build_test_mode_manifest`) with these values in place of the
test-mode ones. The test-mode manifest itself keeps its
values: they feed the example hashes, stored fixtures and tapes of the test suite.
"""

from __future__ import annotations

from typing import Final

import attrs

from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import RunManifest

__all__ = ["DEMO_CCLIP_TAU", "DEMO_H", "DEMO_OUTER_LR", "DEMO_PRECLIP_NORM", "tuned"]

DEMO_H: Final = 6
"""Inner steps a round."""
DEMO_OUTER_LR: Final = 0.4
"""The Nesterov outer learning rate."""
DEMO_PRECLIP_NORM: Final = 1.0
"""``outer.preclip_norm``."""
DEMO_CCLIP_TAU: Final = 1.0
"""``outer.cclip_tau``."""


def tuned(manifest: RunManifest) -> RunManifest:
    """``manifest`` with the demo's ``inner.H``, outer lr, ``preclip_norm`` and ``cclip_tau``."""
    inner = attrs.evolve(manifest.inner, H=DEMO_H)
    outer = attrs.evolve(
        manifest.outer,
        lr=f32_hex(DEMO_OUTER_LR),
        preclip_norm=f32_hex(DEMO_PRECLIP_NORM),
        cclip_tau=f32_hex(DEMO_CCLIP_TAU),
    )
    return attrs.evolve(manifest, inner=inner, outer=outer)
