"""What one container hands execve (its environment strings and its command + args) is bounded,
so no pod makes pod-sync build more than a container could ever be given.

Limits, from the kernel that would refuse more (E2BIG, "argument list too long"):
- MAX_ARG_STRLEN: each argument and each "NAME=value" environment string, its NUL included, is
  at most 32 pages (128 KiB) in Linux's execve.
- MAX_EXEC_STRINGS: all of them together. execve's ARG_MAX is a quarter of the stack limit,
  2 MiB with the usual 8 MiB; half of that leaves room for the pointers and for the image's own
  environment, and is what one container's config may cost pod-sync at most.
"""

from __future__ import annotations

from typing import Callable

from services.pod_sync.expansion import ExpansionTooLarge, expand, utf8_len
from shared.model.podspec import Container, Pod

MAX_ARG_STRLEN = 128 * 1024
MAX_EXEC_STRINGS = 1024 * 1024


class ExecStringsTooLarge(ValueError):
    """The message names the field and the limit it passed."""


Lookup = Callable[[str], str | None]


class ExecStrings:
    """The budget of one container, counted as its environment and arguments are built.
    `where` is the container's field path ("spec.containers[0]")."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.used = 0
        self._env: dict[str, int] = {}  # name -> bytes of its "NAME=value\0", counted in used

    def env(self, name: str, text: str, field: str, lookup: Lookup | None = None) -> str:
        """The value of variable `name`: text expanded with lookup (None: text as it is),
        counted; a later value of the same name replaces the earlier one in the count."""
        prefix = utf8_len(name) + 2  # "=" and the NUL
        others = self.used - self._env.get(name, 0)
        shown = name if len(name) <= 80 else f"{name[:80]}..."  # messages reach the pod's status
        value = self._bounded(text, lookup, f"{self.where}.{field} ({shown})", "environment string", prefix, others)
        self._env[name] = prefix + utf8_len(value)
        self.used = others + self._env[name]
        return value

    def forget_env(self, name: str) -> None:
        self.used -= self._env.pop(name, 0)

    def arg(self, text: str, field: str, lookup: Lookup) -> str:
        value = self._bounded(text, lookup, f"{self.where}.{field}", "argument", 1, self.used)
        self.used += utf8_len(value) + 1
        return value

    def _bounded(self, text: str, lookup: Lookup | None, label: str, kind: str, overhead: int, others: int) -> str:
        own_limit, total_left = MAX_ARG_STRLEN - overhead, MAX_EXEC_STRINGS - others - overhead
        limit = min(own_limit, total_left)
        try:
            if limit < 0:  # the name alone is too long
                raise ExpansionTooLarge(limit)
            if lookup is not None:
                return expand(text, lookup, limit)
            if utf8_len(text) > limit:
                raise ExpansionTooLarge(limit)
            return text
        except ExpansionTooLarge:
            if own_limit <= total_left:
                why = f"would be larger than {MAX_ARG_STRLEN} bytes, the kernel's limit for one {kind} (MAX_ARG_STRLEN)"
            else:
                why = (f"would make the container's environment, command and args larger than {MAX_EXEC_STRINGS} "
                       f"bytes together, pykubelet's limit (half of the usual ARG_MAX)")
            raise ExecStringsTooLarge(f"{label} {why}") from None


def spec_exceeds(pod: Pod) -> str | None:
    """Why the pod's spec alone passes a limit, or None. Only what the spec determines is counted:
    a variable from valueFrom, envFrom or a service, whose value is not known before the
    container starts, is taken as empty. That is the least it can be, so a pod refused here
    could never have started."""
    for kind, containers in (("initContainers", pod.spec.initContainers), ("containers", pod.spec.containers),
                             ("ephemeralContainers", pod.spec.ephemeralContainers)):
        for index, c in enumerate(containers):
            try:
                _least(c, f"spec.{kind}[{index}]")
            except ExecStringsTooLarge as exc:
                return str(exc)
    return None


def _least(c: Container, where: str) -> None:
    strings = ExecStrings(where)
    known: dict[str, str] = {}

    def lookup(name: str) -> str:
        return known.get(name, "")

    for index, e in enumerate(c.env):
        if e.value or not e.valueFrom:
            known[e.name] = strings.env(e.name, e.value or "", f"env[{index}]", lookup)
        else:  # unknown until the container starts (and maybe not set at all: an optional key)
            known.pop(e.name, None)
            strings.forget_env(e.name)
    for field, texts in (("command", c.command), ("args", c.args)):
        for index, text in enumerate(texts):
            strings.arg(text, f"{field}[{index}]", lookup)
