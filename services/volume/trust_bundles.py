"""projected.sources[].clusterTrustBundle (ClusterTrustBundleProjection, GA in Kubernetes 1.37):
the certificates of one ClusterTrustBundle (by name), or of every bundle of a signer whose labels
match a selector, written as one PEM file, as the kubelet's ClusterTrustBundle manager makes it:
every certificate once, however many bundles carry it.

The kubelet shuffles the certificates each time it starts; here they are in a fixed order (by
their DER bytes), so the file changes only when the bundles do."""

from __future__ import annotations

from typing import Any

from services.volume.objects import ObjectSource, ObjectUnavailable
from services.volume.pem import certificate_pem, pem_blocks

# The kubelet's cap on the selector it is given (maxLabelSelectorLength).
MAX_SELECTOR_LENGTH = 100 * 1024


class TrustBundleError(ValueError):
    """The projection cannot be made; the message is the kubelet's where it has one."""


def label_selector(selector: dict[str, Any] | None) -> str | None:
    """A LabelSelector as the API's labelSelector parameter; None for a missing selector, which
    matches nothing (the kubelet's reading), "" for an empty one, which matches everything."""
    if selector is None:
        return None
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), sorted(expr.get("values") or [])
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
        else:
            raise TrustBundleError(f'while parsing label selector: "{op}" is not a valid label selector operator')
    text = ",".join(terms)
    if len(text) > MAX_SELECTOR_LENGTH:
        raise TrustBundleError(f"label selector length ({len(text)}) is larger than {MAX_SELECTOR_LENGTH}")
    return text


def normalize(bundles: list[dict[str, Any]]) -> bytes:
    """The certificates of the bundles, each once, as PEM."""
    # The API server accepts only well-formed certificates; nothing else is passed on.
    ders = {der for bundle in bundles
            for _, der in pem_blocks(str((bundle.get("spec") or {}).get("trustBundle") or "").encode())}
    return b"".join(certificate_pem(der) for der in sorted(ders))


async def project(objects: ObjectSource, source: dict[str, Any]) -> bytes:
    """The file of one clusterTrustBundle source."""
    optional = bool(source.get("optional"))
    name, signer = source.get("name"), source.get("signerName")
    try:
        if name is not None:
            bundle = await objects.cluster_trust_bundle(str(name))
            if bundle is None:
                if optional:
                    return b""
                raise TrustBundleError(f'while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io '
                                       f'"{name}" not found')
            return normalize([bundle])
        if signer is not None:
            selector = label_selector(source.get("labelSelector"))
            found = [] if selector is None else [
                b for b in await objects.cluster_trust_bundles(selector)
                if (b.get("spec") or {}).get("signerName") == signer]
            if not found:
                if optional:
                    return b""
                raise TrustBundleError("combination of signerName and labelSelector matched zero "
                                       "ClusterTrustBundles")
            return normalize(found)
    except ObjectUnavailable as exc:
        raise TrustBundleError(str(exc)) from None
    raise TrustBundleError("ClusterTrustBundle projection requires either name or signerName to be set")
