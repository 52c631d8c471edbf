"""The kubelet's stats endpoints, data only: /stats/summary, /metrics/resource, /metrics/cadvisor
and /spec. provider.py gathers one pass and hands it out; node.py measures the node, pods.py each
pod's containers and logs, volumes.py its volumes; sandbox_stats.py samples the runtime's pod
sandbox stats in the background, cpu_rates.py turns cumulative CPU samples into usageNanoCores and
summary_fields.py writes the Summary's field shapes."""
