"""The kubelet's OpenTelemetry tracing (KubeletConfiguration `tracing`): the process's tracer
provider and OTLP exporter, pod sync spans, and the runtime client's span per call."""
