"""`make conformance`: the upstream Kubernetes e2e [NodeConformance] specs against a node agent."""
