"""A signer for PodCertificateRequests of one signer name, as a cluster's own signer would be: it
issues each new request a leaf for the requested key (a SPIFFE URI naming the pod's service
account), signed by the test CA, for maxExpirationSeconds; a request whose pod asks for
`example.com/deny` in its userAnnotations is denied instead."""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

DENY = "example.com/deny"


class PodCertificateSigner:
    def __init__(self, cp, signer_name: str) -> None:
        self.cp = cp
        self.signer_name = signer_name
        self.answered: dict[str, str] = {}  # "namespace/name" -> Issued or Denied
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-certificate-signer", daemon=True)

    def __enter__(self) -> PodCertificateSigner:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._answer_pending()
            except Exception as exc:  # shown by the test when the pod does not start
                self.errors.append(str(exc))

    def _answer_pending(self) -> None:
        for pcr in json.loads(self.cp.kubectl("get", "podcertificaterequests", "-A", "-o", "json").stdout)["items"]:
            meta, spec = pcr["metadata"], pcr["spec"]
            key = f"{meta['namespace']}/{meta['name']}"
            if spec["signerName"] != self.signer_name or (pcr.get("status") or {}).get("conditions"):
                continue
            now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
            if DENY in (spec.get("unverifiedUserAnnotations") or {}):
                pcr["status"] = {"conditions": [{"type": "Denied", "status": "True", "reason": "Refused",
                                                 "message": "this pod asked to be refused", "lastTransitionTime": now}]}
            else:
                pcr["status"] = self._issue(spec, meta["namespace"], now)
            body = Path(self.cp.root) / f"pcr-{meta['name']}-status.json"
            body.write_text(json.dumps(pcr))
            self.cp.kubectl("replace", "--raw", f"/apis/certificates.k8s.io/v1/namespaces/{meta['namespace']}/"
                            f"podcertificaterequests/{meta['name']}/status", "-f", str(body))
            self.answered[key] = pcr["status"]["conditions"][0]["type"]

    def _issue(self, spec: dict, namespace: str, now: str) -> dict:
        request = x509.load_der_x509_csr(base64.b64decode(spec["stubPKCS10Request"]))
        seconds = int(spec.get("maxExpirationSeconds") or 86400)
        leaf = self.cp.pki.sign_public_key(request.public_key(), seconds,
                                           [f"spiffe://cluster.local/ns/{namespace}/sa/{spec['serviceAccountName']}"])
        begin, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
        return {"conditions": [{"type": "Issued", "status": "True", "reason": "Issued", "message": "issued by the test CA",
                                "lastTransitionTime": now}],
                "certificateChain": leaf.public_bytes(serialization.Encoding.PEM).decode(),
                "notBefore": _rfc3339(begin), "notAfter": _rfc3339(end),
                "beginRefreshAt": _rfc3339(begin + (end - begin) / 2)}


def _rfc3339(t: dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")
