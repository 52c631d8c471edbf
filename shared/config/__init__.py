"""The node's configuration: the KubeletConfiguration file, the kubelet's flags, feature gates, defaults and what is refused."""
