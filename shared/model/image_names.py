"""Image names as the kubelet's image pull records and their allowlist take them
(k8s.io/kubernetes pkg/kubelet/images/pullmanager)."""

from __future__ import annotations

import re

_DIGEST = re.compile(r"@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}\Z")
_TAG = re.compile(r":[\w][\w.-]{0,127}\Z")


def image_without_tag_or_digest(image: str) -> str:
    """The image name the records are keyed by: without its @digest, then without its :tag
    (a port in the registry host is not a tag)."""
    name = _DIGEST.sub("", image)
    last = name.rsplit("/", 1)[-1]
    if _TAG.search(last):
        name = name[: name.rindex(":")]
    return name


def allowlist_pattern(pattern: str) -> str | None:
    """Why an entry of preloadedImagesVerificationAllowlist is not one (the kubelet's checks), or None."""
    if pattern != pattern.strip():
        return f"leading/trailing spaces are not allowed: {pattern}"
    wildcard = pattern.endswith("/*")
    trimmed = pattern[:-1] if wildcard else pattern
    if not trimmed:
        return f"the supplied pattern is too short: {pattern}"
    if "*" in trimmed:
        return f"not a valid wildcard pattern, only patterns ending with '/*' are allowed: {pattern}"
    if wildcard:
        return "at least registry hostname is required" if len(trimmed) == 1 else None
    if image_without_tag_or_digest(trimmed) != trimmed:
        return f"neither tag nor digest is accepted in an image reference: {pattern}"
    return None
