"""Kubernetes resource quantities ("100m", "1.5", "128Mi", "1G") as numbers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(value: str | int | float) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a quantity (examples: 500m, 2, 128Mi, 1G)")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a quantity") from None
    if number < 0:
        raise ValueError(f"{value!r} must not be negative")
    return number * _SUFFIXES[m.group(2)]


def millicores(value: str | int | float) -> int:
    """CPU in millicores, rounded up like the API server does."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def to_bytes(value: str | int | float) -> int:
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def format_millicores(milli: int) -> str:
    """Millicores as the API server writes a quantity made of them: "2", "250m"."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_binary(value: int) -> str:
    """A count of bytes as the API server writes a binary quantity: "128Mi", "1536"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)
