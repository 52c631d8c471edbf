"""The container runtime through CRI: the client, its image service, image references."""
