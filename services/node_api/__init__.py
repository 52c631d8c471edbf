"""node-api: the kubelet API; for now its read-only views on loopback."""
