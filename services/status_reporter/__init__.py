"""status-reporter: pod and node status; the only writer to the API server."""
