"""Parameter spaces of recipe experiments, sampled as in the Hyper paper's recipes.

The discrete parameters form a Cartesian product; ``n`` samples of it repeat combinations as
little as possible (each is used ``n // size`` or ``n // size + 1`` times). Each continuous range
contributes ``n`` samples of its own, matched one to one with the discrete picks. Sampling is
seeded, so a recipe always yields the same trials (a DAG must parse the same way every time).
Pure standard library: this runs at DAG parse time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Range:
    """A continuous (or integer) interval ``[low, high]``, sampled on a linear or log scale,
    at random or on an evenly spaced grid that includes both ends."""

    low: float
    high: float
    scale: Literal["linear", "log"] = "linear"
    sampling: Literal["random", "grid"] = "random"
    integer: bool = False

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"a log scale needs low > 0 (got {self.low})")

    def sample(self, n: int, rng: random.Random) -> list[Scalar]:
        """``n`` values inside ``[low, high]``; grid values are shuffled so their order carries no pattern."""
        to_unit, from_unit = (math.log, math.exp) if self.scale == "log" else (float, float)
        lo, hi = to_unit(self.low), to_unit(self.high)
        if self.sampling == "grid":
            points = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if n > 1 else [(lo + hi) / 2]
            rng.shuffle(points)
        else:
            points = [rng.uniform(lo, hi) for _ in range(n)]
        return [self._fit(from_unit(p)) for p in points]

    def _fit(self, value: float) -> Scalar:
        """Round (6 significant digits, or to an integer) without leaving the interval."""
        value = round(value) if self.integer else float(f"{value:.6g}")
        return min(max(value, self.low), self.high)


def product_size(discrete: Mapping[str, Sequence[Scalar]]) -> int:
    return math.prod(len(values) for values in discrete.values())


def sample_space(
    discrete: Mapping[str, Sequence[Scalar]],
    ranges: Mapping[str, Range],
    n: int,
    seed: int = 0,
) -> list[dict[str, Scalar]]:
    """``n`` parameter assignments: minimal-repetition picks from the product of ``discrete``,
    each matched with the i-th sample of every range. The product is never materialized
    (picks are decoded from their index), so huge spaces cost only ``n``."""
    if n < 1:
        raise ValueError(f"n must be at least 1 (got {n})")
    rng = random.Random(seed)
    size = product_size(discrete)
    rounds, extra = divmod(n, size)
    picks = [index for _ in range(rounds) for index in range(size)] + rng.sample(range(size), extra)
    rng.shuffle(picks)
    names = [*discrete, *ranges]
    columns = [range_.sample(n, rng) for range_ in ranges.values()]
    radix = list(reversed(list(discrete.values())))
    return [dict(zip(names, [*_decode(index, radix), *(column[i] for column in columns)], strict=True))
            for i, index in enumerate(picks)]


def _decode(index: int, radix: list[Sequence[Scalar]]) -> list[Scalar]:
    """The ``index``-th combination of the product in mixed radix (``radix`` lists the parameters'
    values last first: the last parameter varies fastest)."""
    digits = []
    for values in radix:
        index, digit = divmod(index, len(values))
        digits.append(values[digit])
    return digits[::-1]
