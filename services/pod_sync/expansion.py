"""$(VAR) references in command, args and env values, with the kubelet's rules:
$(NAME) becomes the variable's value when it is defined and stays as written when not;
$$ is a literal $; anything else is left alone."""

from __future__ import annotations

from typing import Mapping


def expand(text: str, env: Mapping[str, str]) -> str:
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else text[i:end + 1])
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)
