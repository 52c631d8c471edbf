"""What several services use, grouped by concern. Each package imports only packages on floors below
its own (tests/unit/test_layering.py):

4  process/  one service process's life: service_main, the admin app, logging, systemd notification
3  store/    the SQLite state store, its tables and the views read from them
   bus/      the NATS event bus: subjects, typed wake-up messages, who may publish what, events
   api/      the Kubernetes API server: client, rate budget, kubeconfig, certificates
   runtime/  the container runtime: the CRI client (and its recording fake), images
   csi/      the CSI node and plugin registration stubs
2  host/     this machine: cgroups, CPUs, mounts, safe paths, disk, swap, capacity
   tracing/  the kubelet's OpenTelemetry spans (`tracing`): provider, pod syncs, runtime calls
1  config/   the KubeletConfiguration file, the kubelet's flags, feature gates, defaults, refusals
0  model/    Kubernetes values and objects: the Pod, quantities, QoS, IDs, durations, times
   tasks/    work over time on the event loop: retries, periodic steps, batched wake-ups
"""
