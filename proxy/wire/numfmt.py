"""Numbers printed as MySQL/MariaDB's text protocol prints them (merged aggregates, variances)."""

from __future__ import annotations

from decimal import Decimal


def format_double(x: float) -> bytes:
    """A DOUBLE as MySQL/MariaDB print it: shortest digits, exponent only for very large/small."""
    if x == 0:
        return b"0"
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    exp += len(digits) - len(ds)
    n = len(ds)
    decpt = n + exp  # value = 0.<ds> * 10**decpt
    e = decpt - 1
    if e < -15 or (e >= 15 and n <= decpt):
        mant = ds[0] + ("." + ds[1:] if n > 1 else "")
        text = f"{mant}e{e}"
    elif decpt <= 0:
        text = "0." + "0" * -decpt + ds
    elif decpt >= n:
        text = ds + "0" * (decpt - n)
    else:
        text = ds[:decpt] + "." + ds[decpt:]
    return (("-" if sign else "") + text).encode("ascii")
