"""IP address fields of manifests and config files, checked the same way everywhere."""

from __future__ import annotations

import ipaddress


def ip_address(value: str, hint: str = "") -> str:
    """The value when it is an IPv4 or IPv6 address; a ValueError naming it otherwise."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address{f' ({hint})' if hint else ''}") from None
    return value
