"""Numbers as reports, exports and the run loop's messages write them: decimals or significant digits, a sign,
a unit, and one mark (MISSING) for a value that is absent or not finite. Standard library only, so any layer
that prints a number uses it without importing the report.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_number(value: Any) -> TypeGuard[float]:
    """A finite int or float (not a bool): what a figure or a table can show as a number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number_text(value: float, digits: int = 4, sign: str = "") -> str:
    """`digits` decimals, or `digits` significant digits where the decimals would show fewer than two of
    them: 0.000012345 reads 1.234e-05, never 0.0000 (a loss of 1e-05 is a metric too). sign "+" signs it."""
    if value != 0 and abs(round(value, digits)) < 10.0 ** (1 - digits):  # rounded: 0.0099999 is 0.010
        return f"{value:{sign}.{digits}g}"
    return f"{value:{sign}.{digits}f}"


MISSING = "—"  # what reports and exports write for a value that is absent or not a finite number


def fmt(value: Any, digits: int = 4, unit: str = "") -> str:
    """A number with `digits` decimals (significant digits when small, see number_text) and `unit` after it;
    MISSING for missing or non-finite values; other values as text (a bool as yes/no), without the unit."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number_text(value, digits) + unit
    return str(value) + unit if isinstance(value, int) else str(value)


def fmt_signed(value: Any, digits: int = 4, unit: str = "") -> str:
    """A number with its sign, as `fmt` writes it, and `unit` after it; MISSING for missing or non-finite
    values."""
    if not is_number(value):
        return MISSING
    return number_text(float(value), digits, "+") + unit


def level_text(level: float | None) -> str:
    """A confidence level as the summary writes it: 0.95 → "95 %"."""
    return f"{100 * level:g} %" if level is not None else MISSING
