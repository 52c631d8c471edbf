"""network service entry point: wiring only."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from services.network.iptables_chains import keep_every_family
from services.network.readiness import NetworkManager
from services.network.runtime_cni import RuntimeCNI
from shared.bus.messages import RuntimeStatusChanged
from shared.host.cni import cni_conf_dir
from shared.process.service import ServiceContext, service_main
from shared.runtime.cri import CRIClient
from shared.store import NetworkStatus
from shared.store.runtime_status import runtime_network

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "network"


async def setup(ctx: ServiceContext) -> None:
    cri = CRIClient.for_node(ctx.settings.kubelet, timeout=10.0)
    ctx.on_shutdown(cri.close)
    k = ctx.settings.kubelet
    manager = NetworkManager(ctx.store, ctx.bus, lambda: runtime_network(ctx.store), k.pod_cidr,
                             ctx.settings.root_dir, runtime_cni=RuntimeCNI(cri, cni_conf_dir(ctx.settings.root_dir)),
                             hairpin=k.hairpin_mode != "none")

    async def on_runtime_status(_event: RuntimeStatusChanged) -> None:
        manager.wake.set()

    await ctx.bus.subscribe(RuntimeStatusChanged, on_runtime_status)

    def views() -> APIRouter:
        from fastapi import APIRouter

        r = APIRouter()

        @r.get("/network")
        def network() -> dict[str, Any]:
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
    if k.make_iptables_util_chains:
        ctx.spawn("iptables-util-chains", keep_every_family(), may_finish=True)  # done at once without iptables
    if ctx.settings.cluster_mode:
        # What only cluster mode uses (the API client, the kubeconfig loader) is loaded only then.
        from services.network.node_cidr import NodePodCIDRWatcher
        from shared.api.client import node_api_client

        api = node_api_client(ctx.settings)
        ctx.spawn("node-pod-cidr", NodePodCIDRWatcher(api, ctx.settings.node_name, manager.use_node_pod_cidr).run())
        ctx.on_shutdown(api.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
