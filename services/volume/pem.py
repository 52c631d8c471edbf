"""PEM blocks in and out, as Go's encoding/pem reads and writes them (what the kubelet projects)."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)


def pem_blocks(text: bytes) -> Iterator[tuple[str, bytes]]:
    """(type, DER) of each well-formed block, in order; anything else in the text is skipped.
    Blocks with headers (Proc-Type: ...) are skipped too: certificates never have them."""
    for match in _BLOCK.finditer(text):
        try:
            yield match.group(1).decode(), base64.b64decode(b"".join(match.group(2).split()), validate=True)
        except ValueError:
            continue


def certificate_pem(der: bytes) -> bytes:
    b64 = base64.b64encode(der)
    lines = b"\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
    return b"-----BEGIN CERTIFICATE-----\n" + lines + b"\n-----END CERTIFICATE-----\n"
