"""IP address fields of manifests and config files, checked the same way everywhere."""

from __future__ import annotations

import ipaddress


def ip_address(value: str, hint: str = "") -> str:
    """The value when it is an IPv4 or IPv6 address; a ValueError naming it otherwise."""
    try:
        # An IPv6 scope ("fe80::1%eth0") may hold any text, newlines too, and Go's parser (the
        # API server's) takes none: not an address here either.
        if "%" in value:
            raise ValueError
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value[:80]!r} is not an IP address{f' ({hint})' if hint else ''}") from None
    return value
