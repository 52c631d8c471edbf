"""The Kubernetes API server and the node's identity with it: the client and its rate budget, the kubeconfig, certificates, events."""
