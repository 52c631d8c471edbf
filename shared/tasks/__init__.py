"""Work over time on the event loop: retries and back-off, periodic steps, batched wake-ups, waiting for a
directory to change. Knows nothing of Kubernetes or the node."""
