"""eviction: node resource signals and pressure (eviction itself arrives later)."""
