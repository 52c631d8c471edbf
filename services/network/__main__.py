"""network service entry point: wiring only."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from services.network.readiness import NetworkManager
from shared.cri import CRIClient
from shared.runtime_check import RuntimeHealth
from shared.service import ServiceContext, service_main
from shared.store import NetworkStatus

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "network"


async def setup(ctx: ServiceContext) -> None:
    cri = CRIClient(ctx.settings.kubelet.container_runtime_endpoint)
    manager = NetworkManager(ctx.store, ctx.bus, RuntimeHealth(cri), ctx.settings.kubelet.pod_cidr,
                             ctx.settings.root_dir)

    def views() -> APIRouter:
        from fastapi import APIRouter

        r = APIRouter()

        @r.get("/network")
        def network() -> dict:
            with ctx.store.session() as s:
                row = s.get(NetworkStatus, 1)
                if row is None:
                    return {"ready": False, "message": "not reconciled yet"}
                return {"podCIDR": row.pod_cidr, "ready": row.ready, "reason": row.reason,
                        "message": row.message, "cniConfig": row.conf_path}
        return r

    ctx.app.add_views(views)
    ctx.checks["network"] = manager.ready
    ctx.spawn("network-reconcile", manager.run(ctx.synced))
    if ctx.settings.cluster_mode:
        # What only cluster mode uses (the API client, the kubeconfig loader) is loaded only then.
        from services.network.node_cidr import NodePodCIDRWatcher
        from shared.kube import api_client

        k = ctx.settings.kubelet
        api = await api_client(ctx.settings.kubeconfig, k.kube_api_qps, k.kube_api_burst, ctx.settings.root_dir)
        ctx.spawn("node-pod-cidr", NodePodCIDRWatcher(api, ctx.settings.node_name, manager.use_node_pod_cidr).run())
        ctx.on_shutdown(api.close)
    ctx.on_shutdown(cri.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
