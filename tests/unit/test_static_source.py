from sqlalchemy import select

from services.pod_sync.static_source import StaticPodSource, scan_directory
from shared.store import DesiredPod, ManifestError

GOOD = """apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: web, image: "reg/web:1"}]
"""


def test_scan_names_uid_and_errors(tmp_path):
    d = tmp_path / "manifests"
    d.mkdir()
    (d / "web.yaml").write_text(GOOD)
    (d / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: c}]\n")
    (d / ".web.yaml.swp").write_text("junk")
    (d / "notes.txt").write_text("not a manifest")
    r = scan_directory(d, "node1")
    [pod] = r.pods.values()
    assert pod.metadata.name == "web-node1"
    assert pod.spec.nodeName == "node1"
    assert pod.metadata.annotations["kubernetes.io/config.source"] == "file"
    assert list(r.errors) == [str(d / "broken.yaml")]
    assert "spec.containers[0].image: Required value" in r.errors[str(d / "broken.yaml")]


def test_uid_is_stable_and_changes_with_content(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "web.yaml").write_text(GOOD)
    uid1 = next(iter(scan_directory(d, "node1").pods))
    assert uid1 == next(iter(scan_directory(d, "node1").pods))
    (d / "web.yaml").write_text(GOOD.replace("web:1", "web:2"))
    uid2 = next(iter(scan_directory(d, "node1").pods))
    assert uid2 != uid1
    assert next(iter(scan_directory(d, "node2").pods)) != uid2


def test_duplicate_pod_names_are_reported(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "a.yaml").write_text(GOOD)
    (d / "b.yaml").write_text(GOOD.replace("web:1", "web:3"))
    r = scan_directory(d, "n")
    assert len(r.pods) == 1
    assert "already defined by" in r.errors[str(d / "b.yaml")]


async def test_source_applies_adds_edits_and_removals(tmp_path, store):
    d = tmp_path / "m"
    d.mkdir()
    src = StaticPodSource(str(d), "node1", store, rescan_every=20)
    (d / "web.yaml").write_text(GOOD)
    first = await src.scan()
    assert len(first) == 1
    assert await src.scan() == set()  # nothing changed, nothing to do
    (d / "web.yaml").write_text(GOOD.replace("web:1", "web:2"))
    second = await src.scan()
    assert len(second) == 2  # old one stops, new one starts
    with store.session() as s:
        rows = {r.uid: r.deleting for r in s.scalars(select(DesiredPod))}
    assert rows[next(iter(first))] is True
    (d / "web.yaml").unlink()
    (d / "x.yaml").write_text("kind: Pod\nmetadata: {name: x}\n")
    await src.scan()
    with store.session() as s:
        assert all(r.deleting for r in s.scalars(select(DesiredPod)))
        errors = {e.source_path: e.error for e in s.scalars(select(ManifestError))}
    assert "spec: Required value" in errors[str(d / "x.yaml")]


# -- hostile manifest files --------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))


def test_hostile_files_are_reported_once_each_and_the_good_pod_still_runs(tmp_path):
    d = tmp_path / "manifests"
    d.mkdir()
    (d / "web.yaml").write_text(GOOD)
    (d / "bomb.yaml").write_text(BOMB)
    (d / "huge.yaml").write_text(GOOD + "#" * (2 * 2**20))
    secret = tmp_path / "shadow"
    secret.write_text("root: {password: 'S3CRET-HASH'\n")  # broken YAML holding a secret
    (d / "shadow.yaml").symlink_to(secret)
    os_fifo = d / "fifo.yaml"
    import os

    os.mkfifo(os_fifo)
    many = GOOD.replace('containers: [{name: web, image: "reg/web:1"}]',
                        "containers: [" + ", ".join(f'{{name: c{i}, image: "i"}}' for i in range(200)) + "]")
    (d / "many.yaml").write_text(many.replace("name: web}", "name: many}"))
    r = scan_directory(d, "node1")
    assert [p.metadata.name for p in r.pods.values()] == ["web-node1"]
    errors = {k.rsplit("/", 1)[1]: v for k, v in r.errors.items()}
    assert "aliases; at most 64 are accepted" in errors["bomb.yaml"]
    assert "a manifest may be at most 1572864 bytes" in errors["huge.yaml"]
    assert "has 200 containers; pykubelet runs at most 128" in errors["many.yaml"]
    assert "fifo.yaml" not in errors, "not a regular file: never opened, never a manifest"
    assert errors["shadow.yaml"].startswith("manifest invalid: not valid YAML/JSON: ")
    assert "S3CRET" not in errors["shadow.yaml"], "the error names the line, not the content"
