"""The Kubernetes values and objects every service reasons about: the Pod, quantities, QoS, IDs, times, probe results."""
