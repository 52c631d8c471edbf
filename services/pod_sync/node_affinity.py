"""Does a pod belong on this node? nodeSelector and required node affinity, matched against the
labels the node registers with, as the kubelet's admission does (predicate NodeAffinity).

The scheduler already checked an API pod; a static pod, or an API pod bound by hand, is checked
only here. Preferred terms and pod (anti-)affinity are the scheduler's alone.
"""

from __future__ import annotations

from typing import Any

from shared.model.podspec import Pod


class AffinityInvalid(ValueError):
    """A term the API server would not have accepted; the pod cannot be matched."""


def _number(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AffinityInvalid(f"{value!r} is not an integer (Gt and Lt compare integers)") from None


def _requirement(req: Any, fields: dict[str, str]) -> bool:
    if not isinstance(req, dict):
        raise AffinityInvalid("a requirement must be an object")
    key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
    if not isinstance(key, str):
        raise AffinityInvalid(f"a requirement's key must be a string, not {key!r}")
    if not isinstance(values, list):
        raise AffinityInvalid(f"values of {key!r} must be a list")
    present = key in fields
    if op == "In":
        return present and fields[key] in values
    if op == "NotIn":
        return not present or fields[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise AffinityInvalid(f"{op} of {key!r} takes exactly one value")
        if not present:
            return False
        have, want = _number(fields[key]), _number(values[0])
        return have > want if op == "Gt" else have < want
    raise AffinityInvalid(f"operator {op!r} of {key!r} is not In, NotIn, Exists, DoesNotExist, Gt or Lt")


def _term(term: Any, labels: dict[str, str], node_name: str) -> bool:
    """All of a term's requirements hold; a term with none matches nothing (as upstream)."""
    if not isinstance(term, dict):
        raise AffinityInvalid("a nodeSelectorTerm must be an object")
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_requirement(r, labels) for r in exprs) and \
        all(_requirement(r, {"metadata.name": node_name}) for r in fields)


def matches_node(pod: Pod, labels: dict[str, str], node_name: str) -> bool:
    selector = pod.spec.nodeSelector
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((pod.spec.affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list):
        raise AffinityInvalid("requiredDuringSchedulingIgnoredDuringExecution needs nodeSelectorTerms")
    return any(_term(t, labels, node_name) for t in terms)
