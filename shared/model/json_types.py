"""Type names for decoded JSON/YAML whose fields pykubelet does not model."""

from __future__ import annotations

from typing import Any, TypeAlias

# A JSON object as json/yaml decode it: Kubernetes object parts (a pod's status, a fieldRef),
# a container runtime's own config. Its values are whatever the document holds.
JSONObject: TypeAlias = dict[str, Any]
