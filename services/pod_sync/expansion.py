"""$(VAR) references in command, args and env values, with the kubelet's rules
(third_party/forked/golang/expansion): $(NAME) becomes the variable's value when it is defined
and stays as written when not; $$ is a literal $; a `$(` without a `)` and a `$` before any
other character stay as written. What a reference is replaced with is never scanned again.

The output is bounded. Values may reference earlier values, so 30 variables that are each
`$(previous)$(previous)` ask for 2^29 times the first one: expand stops with
ExpansionTooLarge the moment the output would pass its limit, without building it."""

from __future__ import annotations

from typing import Callable


class ExpansionTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"expands to more than {limit} bytes")
        self.limit = limit


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def expand(text: str, lookup: Callable[[str], str | None], limit: int | None = None) -> str:
    """text with its references replaced; lookup(name) is the value, None when undefined.
    limit: the most UTF-8 bytes the result may have."""
    out: list[str] = []
    size = 0

    def put(piece: str) -> None:
        nonlocal size
        size += utf8_len(piece)
        if limit is not None and size > limit:
            raise ExpansionTooLarge(limit)
        out.append(piece)

    i, n = 0, len(text)
    while i < n:
        j = text.find("$", i)
        if j == -1 or j + 1 == n:
            put(text[i:])
            break
        put(text[i:j])
        nxt = text[j + 1]
        if nxt == "$":
            put("$")
            i = j + 2
        elif nxt == "(":
            end = text.find(")", j + 2)
            if end == -1:
                put("$(")  # unterminated: as written, and scanning goes on after it
                i = j + 2
            else:
                value = lookup(text[j + 2:end])
                put(text[j:end + 1] if value is None else value)
                i = end + 1
        else:
            put("$")
            i = j + 1
    return "".join(out)
