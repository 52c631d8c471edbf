"""What an admin view may show of a pod: names and references, never values."""

from __future__ import annotations

import json

from shared.model.redact import REDACTED, redact, secret_values

POD = {
    "metadata": {"name": "web", "annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"env": [{"value": "hunter2-pw"}]}),
        "team": "payments"}},
    "spec": {
        "containers": [{"name": "app", "command": ["sh", "-c", "echo $(DB_PASSWORD)"],
                        "env": [{"name": "DB_PASSWORD", "value": "hunter2-pw"},
                                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                                {"name": "SHORT", "value": "80"}],
                        "livenessProbe": {"httpGet": {"port": 80, "httpHeaders": [
                            {"name": "Authorization", "value": "Bearer tok-123456"}]}}}],
        "initContainers": [{"name": "init", "env": [{"name": "X", "value": "init-secret-1"}]}],
        "volumes": [{"name": "s", "secret": {"secretName": "db"}}]},
}


def test_values_go_names_and_references_stay():
    out = redact(POD)
    app = out["spec"]["containers"][0]
    assert app["env"] == [{"name": "DB_PASSWORD", "value": REDACTED},
                          {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                          {"name": "SHORT", "value": REDACTED}]
    assert app["livenessProbe"]["httpGet"] == {"port": 80, "httpHeaders": [{"name": "Authorization",
                                                                            "value": REDACTED}]}
    assert app["command"] == ["sh", "-c", "echo $(DB_PASSWORD)"], "a reference is not a value"
    assert out["spec"]["initContainers"][0]["env"][0]["value"] == REDACTED
    assert out["metadata"]["annotations"] == {"kubectl.kubernetes.io/last-applied-configuration": REDACTED,
                                              "team": "payments"}
    assert out["spec"]["volumes"] == POD["spec"]["volumes"]
    assert POD["spec"]["containers"][0]["env"][0]["value"] == "hunter2-pw", "the input is left as it was"


def test_secret_and_config_map_data_and_credentials():
    out = redact({"kind": "Secret", "data": {"pw": "aHVudGVyMg=="}, "stringData": {"pw": "hunter2"},
                  "auth": {"token": "eyJhbGciOi.x.y", "password": "pw-pw-pw", "mode": "Webhook"}})
    assert out == {"kind": "Secret", "data": {"pw": REDACTED}, "stringData": {"pw": REDACTED},
                   "auth": {"token": REDACTED, "password": REDACTED, "mode": "Webhook"}}


def test_values_quoted_in_other_text_are_replaced_too():
    view = [{"pod": POD, "message": 'exec: "hunter2-pw": executable file not found; port 80 refused'},
            {"message": "header Bearer tok-123456 sent", "note": "from the store: store-only-value"}]
    out = redact(view, known={"store-only-value", "ab"})
    assert out[0]["message"] == f'exec: "{REDACTED}": executable file not found; port 80 refused', \
        "a value shorter than MIN_QUOTED is not looked for inside text"
    assert out[1] == {"message": f"header {REDACTED} sent", "note": f"from the store: {REDACTED}"}
    assert "hunter2-pw" not in json.dumps(out) and "tok-123456" not in json.dumps(out)


def test_secret_values_finds_every_kind():
    assert secret_values(POD) == {"hunter2-pw", "80", "Bearer tok-123456", "init-secret-1",
                                  POD["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]}


def test_what_is_not_json_like_passes_through():
    assert redact([1, None, True, 2.5, {"env": "not a list"}]) == [1, None, True, 2.5, {"env": "not a list"}]
