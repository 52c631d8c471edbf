"""pod-sync's metrics, under the kubelet's names."""

from prometheus_client import Counter, Gauge, Histogram

_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600,
                  900, 1200, 1800, 2700, 3600)

POD_START_DURATION = Histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from the kubelet seeing a pod for the first time to the pod starting to run",
    buckets=_START_BUCKETS)
POD_START_SLI_DURATION = Histogram(
    "kubelet_pod_start_sli_duration_seconds",
    "Duration in seconds to start a pod, excluding time to pull images",
    buckets=_START_BUCKETS)
STARTED_CONTAINERS = Counter("kubelet_started_containers_total",
                             "Cumulative number of containers started", ["container_type"])
STARTED_CONTAINER_ERRORS = Counter("kubelet_started_containers_errors_total",
                                   "Cumulative number of errors when starting containers",
                                   ["code", "container_type"])
# Pod sandboxes attempted and failed, as the kubelet counts them; those of pods with
# hostUsers: false apart, with an error when their sync failed anywhere.
STARTED_PODS = Counter("kubelet_started_pods_total", "Cumulative number of pods started")
STARTED_POD_ERRORS = Counter("kubelet_started_pods_errors_total", "Cumulative number of errors when starting pods")
STARTED_USERNS_PODS = Counter("kubelet_started_user_namespaced_pods_total",
                              "Cumulative number of pods with user namespaces started. This metric will only be "
                              "collected on Linux.")
STARTED_USERNS_POD_ERRORS = Counter("kubelet_started_user_namespaced_pods_errors_total",
                                    "Cumulative number of errors when starting pods with user namespaces. This "
                                    "metric will only be collected on Linux.")
# Image volumes, counted as the kubelet counts them at each container start: requested per
# volume had, mounted (or failed, when the runtime said ImageVolumeMountFailed) per volumeMount.
IMAGE_VOLUME_REQUESTED = Counter("kubelet_image_volume_requested_total", "Number of requested image volumes.")
IMAGE_VOLUME_MOUNTED = Counter("kubelet_image_volume_mounted_succeed_total",
                               "Number of successful image volume mounts.")
IMAGE_VOLUME_MOUNT_ERRORS = Counter("kubelet_image_volume_mounted_errors_total",
                                    "Number of failed image volume mounts.")
RUNNING_PODS = Gauge("kubelet_running_pods", "Number of pods that have a running pod sandbox")
RUNNING_CONTAINERS = Gauge("kubelet_running_containers", "Number of containers currently running",
                           ["container_state"])

# operation_type: create (the pod's first sync), update, sync (periodic, a retry) or kill (the
# pod is no longer wanted), as the kubelet's pod workers say it.
POD_WORKER_DURATION = Histogram("kubelet_pod_worker_duration_seconds",
                                "Duration in seconds to sync a single pod. Broken down by operation type: "
                                "create, update, or sync", ["operation_type"])

# memoryReservationPolicy TieredReservation (cgroup v2): what the QoS tiers protect, as the
# kubelet 1.37 reports it (its MemoryQoS gate is on by default).
MEMORY_QOS_MIN_BYTES = Gauge("kubelet_memory_qos_node_memory_min_bytes",
                             "Total cgroup v2 memory.min in bytes for Guaranteed pods. This memory is hard-reserved "
                             "and never reclaimed by the kernel.")
MEMORY_QOS_LOW_BYTES = Gauge("kubelet_memory_qos_node_memory_low_bytes",
                             "Total cgroup v2 memory.low in bytes for Burstable pods. This memory is soft-reserved "
                             "and may be reclaimed under extreme pressure.")
