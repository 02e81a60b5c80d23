"""The demo's DiLoCo settings, as bench/parity.py measured them (docs/results/parity.md).

The demo runs the CPU test-mode manifest
(:func:`hypertrain.protocol.testmode.build_test_mode_manifest`) with these values in place of the
test-mode ones. The test-mode manifest itself keeps its values: they feed the example hashes,
stored fixtures and tapes of the test suite.
"""

from __future__ import annotations

from typing import Final

import attrs

from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import RunManifest

__all__ = [
    "DEMO_CCLIP_TAU",
    "DEMO_H",
    "DEMO_OUTER_LR",
    "DEMO_OUTER_MOMENTUM",
    "DEMO_PRECLIP_NORM",
    "tuned",
]

DEMO_H: Final = 6
"""Inner steps a round: H 6 beat 30 and 100 at equal tokens (docs/results/parity.md)."""
DEMO_OUTER_LR: Final = 0.5
"""The outer learning rate of the best arm (docs/results/parity.md)."""
DEMO_OUTER_MOMENTUM: Final = 0.5
"""The outer (Nesterov) momentum of the best arm: with 0.9 every H lagged further behind
data-parallel (docs/results/parity.md)."""
DEMO_PRECLIP_NORM: Final = 7.0
"""``outer.preclip_norm``: twice the largest honest delta norm bench/parity.py saw at H 6
(3.46, round 0: every miner's fresh AdamW moves every weight), so no honest demo delta is
clipped, while bench/byzantine.py's noise and scaled attackers (10x and 100x an honest norm)
are (docs/results/parity.md)."""
DEMO_CCLIP_TAU: Final = 7.0
"""``outer.cclip_tau``: twice the largest honest ``|delta - center|`` at H 6 (3.46, round 0,
where the center is zero) (docs/results/parity.md)."""


def tuned(manifest: RunManifest) -> RunManifest:
    """``manifest`` with the demo's ``inner.H`` and outer lr, momentum, ``preclip_norm`` and
    ``cclip_tau``."""
    inner = attrs.evolve(manifest.inner, H=DEMO_H)
    outer = attrs.evolve(
        manifest.outer,
        lr=f32_hex(DEMO_OUTER_LR),
        momentum=f32_hex(DEMO_OUTER_MOMENTUM),
        preclip_norm=f32_hex(DEMO_PRECLIP_NORM),
        cclip_tau=f32_hex(DEMO_CCLIP_TAU),
    )
    return attrs.evolve(manifest, inner=inner, outer=outer)
