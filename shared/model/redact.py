"""What an admin view may show of a pod: everything but its secrets.

The admin views serve pods as the node has them (node-api's /pods is whole manifests) and
messages about them. Their answers go through redact() (shared/process/admin.py does it for every view):
- the `value` of every entry of an `env` list (EnvVar: a password as often as not) and of an
  `httpHeaders` list (a probe's Authorization header), wherever in the answer it is;
- every value of a `data`, `stringData` or `binaryData` map (a Secret's or ConfigMap's content);
- kubectl's last-applied-configuration annotation (a copy of the whole object, env values
  included);
- a string under a credential's key (`token`, `password`, `bearerToken`, `authorization`);
- and any of those values, or of the `known` ones the caller gives (the node's pods' env and
  header values), quoted inside other text: a message may quote a command built from
  `$(PASSWORD)`. Values shorter than MIN_QUOTED are not looked for inside text: "true" or "80"
  would blank out half a view; where they are a field of their own they are still redacted.
Names stay (DB_PASSWORD is shown, its value is not), as do references (secretKeyRef names the
secret and key, not the value).
"""

from __future__ import annotations

from typing import Any, Iterable

REDACTED = "<redacted>"
MIN_QUOTED = 6

_VALUE_LISTS = frozenset({"env", "httpHeaders"})
_DATA_MAPS = frozenset({"data", "stringData", "binaryData"})
_WHOLE_OBJECT_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
_CREDENTIAL_KEYS = frozenset({"token", "password", "bearertoken", "authorization"})


def secret_values(obj: Any) -> set[str]:
    """The strings redact() replaces where they are fields of their own, found anywhere in obj."""
    found: set[str] = set()
    _collect(obj, found)
    return found


def redact(obj: Any, known: Iterable[str] = ()) -> Any:
    """A copy of obj (JSON-like: dicts, lists, scalars) without its secrets."""
    quoted = sorted({v for v in (*known, *secret_values(obj)) if len(v) >= MIN_QUOTED}, key=len, reverse=True)
    return _redact(obj, quoted)


def _collect(obj: Any, found: set[str]) -> None:
    if isinstance(obj, list):
        for item in obj:
            _collect(item, found)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key in _VALUE_LISTS and isinstance(value, list):
                found.update(e["value"] for e in value if isinstance(e, dict) and isinstance(e.get("value"), str))
            elif key in _DATA_MAPS and isinstance(value, dict):
                found.update(v for v in value.values() if isinstance(v, str))
            elif key == "annotations" and isinstance(value, dict):
                found.update(v for k, v in value.items() if k in _WHOLE_OBJECT_ANNOTATIONS and isinstance(v, str))
            elif isinstance(key, str) and key.lower() in _CREDENTIAL_KEYS and isinstance(value, str):
                found.add(value)
            _collect(value, found)


def _redact(obj: Any, quoted: list[str]) -> Any:
    if isinstance(obj, str):
        return _unquote(obj, quoted)
    if isinstance(obj, list):
        return [_redact(item, quoted) for item in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[Any, Any] = {}
    for key, value in obj.items():
        name = _unquote(key, quoted) if isinstance(key, str) else key
        if key in _VALUE_LISTS and isinstance(value, list):
            out[name] = [{**_redact(e, quoted), "value": REDACTED} if isinstance(e, dict) and "value" in e
                         else _redact(e, quoted) for e in value]
        elif key in _DATA_MAPS and isinstance(value, dict):
            out[name] = {_unquote(str(k), quoted): REDACTED for k in value}
        elif key == "annotations" and isinstance(value, dict):
            out[name] = {_unquote(str(k), quoted): REDACTED if k in _WHOLE_OBJECT_ANNOTATIONS
                         else _redact(v, quoted) for k, v in value.items()}
        elif isinstance(key, str) and key.lower() in _CREDENTIAL_KEYS and isinstance(value, str):
            out[name] = REDACTED
        else:
            out[name] = _redact(value, quoted)
    return out


def _unquote(text: str, quoted: list[str]) -> str:
    for value in quoted:  # longest first: a value inside another is replaced with it
        if value in text:
            text = text.replace(value, REDACTED)
    return text
