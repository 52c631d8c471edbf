"""Go's renderings of values in the messages the kubelet gives, so that pykubelet's
answers read as the kubelet's (and a hostile value cannot break a line)."""

from __future__ import annotations

import json
from typing import Any

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
               '"': '\\"', "\\": "\\\\"}


def go_quote(text: str) -> str:
    """Go's strconv.Quote, which its parse errors quote the input with: one line whatever the
    body holds (a byte that is not UTF-8 comes from surrogateescape and is shown as \\xNN)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def go_json(value: Any) -> str:
    """Go's json.Marshal of a value (compact, with <, > and & escaped as Go escapes them), which
    apimachinery's field errors show a list or a time with."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


GO_TRUE = ("1", "t", "T", "true", "TRUE", "True")
GO_FALSE = ("0", "f", "F", "false", "FALSE", "False")


def go_parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool (ValueError with its words for anything else)."""
    if text in GO_TRUE:
        return True
    if text in GO_FALSE:
        return False
    raise ValueError(f"strconv.ParseBool: parsing {go_quote(text)}: invalid syntax")
