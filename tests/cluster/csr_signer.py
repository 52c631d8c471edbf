"""A signer for kubernetes.io/kubelet-serving CSRs, as kube-controller-manager's would be: it
approves each new one and issues it with the test CA. The first certificate is short-lived so
that the node's rotation shows within the test run."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

from cryptography import x509

SIGNER = "kubernetes.io/kubelet-serving"


class KubeletServingSigner:
    def __init__(self, cp, first_seconds: float = 60, later_seconds: float = 3600) -> None:
        self.cp = cp
        self.first_seconds = first_seconds
        self.later_seconds = later_seconds
        self.issued: list[tuple[str, int]] = []  # (CSR name, certificate serial)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="csr-signer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._sign_pending()
            except Exception as exc:  # shown by the test that checks rotation
                self.errors.append(str(exc))

    def _sign_pending(self) -> None:
        csrs = json.loads(self.cp.kubectl("get", "csr", "-o", "json").stdout)["items"]
        for csr in csrs:
            if csr["spec"].get("signerName") != SIGNER or csr.get("status", {}).get("certificate"):
                continue
            name = csr["metadata"]["name"]
            self.cp.kubectl("certificate", "approve", name)
            csr = json.loads(self.cp.kubectl("get", "csr", name, "-o", "json").stdout)
            seconds = self.first_seconds if not self.issued else self.later_seconds
            pem = self.cp.pki.sign_csr(base64.b64decode(csr["spec"]["request"]), seconds)
            csr.setdefault("status", {})["certificate"] = base64.b64encode(pem).decode()
            body = Path(self.cp.root) / f"{name}-status.json"
            body.write_text(json.dumps(csr))
            self.cp.kubectl("replace", "--raw", f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status",
                            "-f", str(body))
            self.issued.append((name, x509.load_pem_x509_certificate(pem).serial_number))
