"""When each proxy is probed next (pure; randomness is passed in).

A proxy keeps a fixed slot in its interval, so one slow probe does not
shift the later ones. Slots are random: after an operator restart a seeded
fleet spreads its first probes over one interval, and a fleet created at once
(never probed, so probed at once) takes random slots after its first probe.
"""

from __future__ import annotations

import random


def first_due(now: float, interval: float, *, seeded: bool, rng: random.Random) -> float:
    """A proxy with a known verdict probes at a random point in its first interval; others now."""
    return now + rng.random() * interval if seeded else now


def next_due(due: float, now: float, interval: float, *, phased: bool, rng: random.Random) -> float:
    """The slot after a probe that was due at `due` and finished at `now`.

    A phased proxy keeps its slot, one interval on (or now, if the probe
    overran it). An unphased one, whose first probe ran at once, moves to a
    random slot between half an interval and one and a half intervals on.
    """
    if phased:
        return max(due + interval, now)
    return max(due + interval * (0.5 + rng.random()), now)
