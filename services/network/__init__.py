"""network: the node pod network (CNI config, readiness; DNS and ports later)."""
