"""eviction: node resource signals, thresholds, pressure conditions and pod eviction decisions."""
