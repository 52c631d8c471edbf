"""pod-sync: pod sources, and driving the container runtime to match them."""
