"""STDDEV / VARIANCE and kin over several shardingNodes: each node sends COUNT(x), SUM(x) and SUM(x*x)
of its rows (exact integers or DECIMALs), the proxy adds them and computes the statistic exactly,
rounding once to a double as MariaDB's result is a DOUBLE (printed with the column's decimals).

MariaDB computes these in double precision with Welford's recurrence, row by row; the exact value
rounded once is within an ulp or two of it, which the decimals MariaDB prints absorb. A node sum that
is itself a double (a FLOAT/DOUBLE or string argument) would lose digits in SUM(x*x), so it is refused.
"""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any, Callable

from meta.errors import NotSupported

from proxy.wire.numfmt import format_double
from proxy.wire.constants import DECIMAL_TYPES, INTEGER_TYPES

_SQRT = Context(prec=60)
NOT_FIXED_DEC = 31


def moment_columns(agg: Any, columns: list[Any], width: int, absolute: Callable[[int, int], int]) -> tuple[int, int]:
    """The absolute columns of an aggregate's SUM(x) and SUM(x*x), checked to be exact numbers."""
    if agg.sum_column is None or agg.squares_column is None or agg.count_column is None:
        raise NotSupported(f"the merge plan of {agg.func} lacks its partial sums")
    cols = (absolute(agg.sum_column, width), absolute(agg.squares_column, width))
    for c in cols:
        if columns[c].type not in INTEGER_TYPES | DECIMAL_TYPES:
            raise NotSupported(f"{agg.func} of a value that is not an integer or DECIMAL cannot be merged "
                               f"across shardingNodes exactly (its partial sums would be rounded doubles)")
    return cols


def _exact(v: bytes) -> Fraction:
    return Fraction(Decimal(v.decode("ascii")))


def add_moments(acc: Any, row: list[bytes | None], count_col: int | None, moments: tuple[int, int]) -> None:
    """Fold one node row's COUNT, SUM and SUM of squares into the group's accumulator."""
    c = row[count_col] if count_col is not None else None
    if c is None or c == b"0":
        return
    s, q = row[moments[0]], row[moments[1]]
    acc.n += int(c)
    part = (_exact(s) if s is not None else Fraction(0), _exact(q) if q is not None else Fraction(0))
    if acc.v is None:
        acc.v = list(part)
    else:
        acc.v[0] += part[0]
        acc.v[1] += part[1]


def variance_result(func: str, acc: Any, decimals: int) -> bytes | None:
    """The merged statistic as MariaDB sends it: NULL without enough rows, else a DOUBLE."""
    n = acc.n
    samp = func in ("VAR_SAMP", "STDDEV_SAMP")
    if n == 0 or (samp and n == 1) or acc.v is None:
        return None
    s, q = acc.v
    var = (q - s * s / n) / (n - 1 if samp else n)
    if var < 0:   # cannot happen with exact sums; kept as MariaDB clamps it
        var = Fraction(0)
    if func.startswith("STDDEV"):
        root = _SQRT.sqrt(_SQRT.divide(Decimal(var.numerator), Decimal(var.denominator)))
        exact, x = Fraction(root), float(root)
    else:
        exact, x = var, float(var)
    if decimals < NOT_FIXED_DEC and _on_a_tie(exact, decimals):
        raise NotSupported(f"{func} across shardingNodes is not supported here: its value falls halfway between two "
                           f"numbers of {decimals} decimals, where MariaDB's last digit depends on the rounding "
                           f"errors of its row-by-row double arithmetic")
    return format_fixed(x, decimals)


def _on_a_tie(value: Fraction, decimals: int) -> bool:
    """True when value is halfway (within far more than a double's error) between two numbers printed with
    `decimals` decimals: MariaDB's Welford sum, a few ulps off, may print either."""
    scaled = abs(value) * 10 ** decimals
    frac = scaled - math.floor(scaled)
    return abs(frac - Fraction(1, 2)) <= scaled / 10 ** 11


def format_fixed(x: float, decimals: int) -> bytes:
    """A DOUBLE as MariaDB's text protocol prints it: fixed decimals when the column has them."""
    if decimals < NOT_FIXED_DEC:
        text = f"{x:.{decimals}f}"
        if text.startswith("-") and float(text) == 0:
            text = text[1:]
        return text.encode("ascii")
    if math.isnan(x):
        return b"nan"
    return format_double(x)
