"""Small OCI images built from the host's static busybox, for demos, tests and the pause image.

No public registry is reachable from the nodes this runs on, so images are assembled locally
(an OCI image is a gzipped tar layer, a config JSON and a manifest JSON) and pushed to a local
registry that containerd pulls from like any other.
"""
