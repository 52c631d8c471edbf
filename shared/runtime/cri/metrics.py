"""Runtime operation metrics under the names the kubelet uses."""

from prometheus_client import Counter, Histogram

RUNTIME_OPERATIONS = Counter(
    "kubelet_runtime_operations_total",
    "Cumulative number of runtime operations by operation type.",
    ["operation_type"],
)
RUNTIME_OPERATION_ERRORS = Counter(
    "kubelet_runtime_operations_errors_total",
    "Cumulative number of runtime operation errors by operation type.",
    ["operation_type"],
)
RUNTIME_OPERATION_DURATION = Histogram(
    "kubelet_runtime_operations_duration_seconds",
    "Duration in seconds of runtime operations. Broken down by operation type.",
    ["operation_type"],
    buckets=(0.005, 0.0125, 0.03125, 0.078125, 0.1953125, 0.48828125, 1.220703125, 3.0517578125,
             7.62939453125, 19.073486328125, 47.6837158203125, 119.20928955078125, 298.0232238769531),
)
