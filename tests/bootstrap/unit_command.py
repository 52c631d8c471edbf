"""The command systemd runs for a service, from its unit and drop-ins, as one `sh -c` script:
Environment= and EnvironmentFile= (a leading '-': the file may be missing) in order, then the last
ExecStart= (an empty one resets it), its $VAR words split on whitespace as systemd splits them.
Enough of systemd's rules to run kubelet.service with kubeadm's drop-in where systemd is not
the init system: the tests are."""

from __future__ import annotations

import shlex


def shell_command(*unit_texts: str) -> str:
    env: list[str] = []
    exec_start = ""
    for text in unit_texts:
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";", "[")):
                continue
            key, _, value = line.partition("=")
            if key == "Environment":
                env += [f"export {shlex.quote(assignment)}" for assignment in shlex.split(value)]
            elif key == "EnvironmentFile":
                path = shlex.quote(value.removeprefix("-"))
                load = f"{{ set -a; . {path}; set +a; }}"
                env.append(f"if [ -f {path} ]; then {load}; fi" if value.startswith("-") else load)
            elif key == "ExecStart":
                exec_start = value
    if not exec_start:
        raise ValueError("the unit has no ExecStart")
    return "; ".join([*env, f"exec {exec_start}"])
