"""This machine as the node sees it: cgroups, CPUs, mounts, paths under the root dir, disk, swap, the node's capacity."""
