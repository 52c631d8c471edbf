"""probe: liveness, readiness and startup probes (workers arrive with the probe issue)."""
