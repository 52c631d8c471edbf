"""CSI and kubelet plugin-registration gRPC stubs, generated from protos/ at build time.

`make deps` (or `make protos`) writes them to shared/csi/gen/; they are not committed."""

from __future__ import annotations

try:
    from shared.csi.gen import csi_pb2 as csi
    from shared.csi.gen import csi_pb2_grpc as csi_grpc
    from shared.csi.gen import pluginregistration_pb2 as registration
    from shared.csi.gen import pluginregistration_pb2_grpc as registration_grpc
except ImportError as exc:  # pragma: no cover - depends on the build step
    raise ImportError(f"the CSI gRPC stubs are missing ({exc}); run `make protos` to generate them "
                      "from protos/") from None

__all__ = ["csi", "csi_grpc", "registration", "registration_grpc"]
