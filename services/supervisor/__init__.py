"""The local node supervisor: `pykubelet up` starts and watches every part of a node."""
