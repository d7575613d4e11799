"""Build a busybox-static container image and push it to a registry, by hand.

The ``cri`` runtime's promise is that the sandbox daemon runs from an *unmodified* image
with no Python and no libc. The harshest such image is the busybox-static rootfs of
:mod:`devstack.rootfs` (one static binary and its applet links, no ``/lib``). No public
registry is reachable here, so the tooling makes the image itself: one gzip'd tar layer, an
image config and a Docker schema-2 manifest, pushed with the registry API v2 (monolithic
blob uploads). That is ~100 lines and needs no buildah or skopeo: fewer packages to install
in CI, and the image is byte-for-byte reproducible (fixed mtimes and owners), so pushing it
twice is a no-op.

``padding`` adds a file of that many incompressible bytes, so a benchmark can pull an image
whose transfer is measurable (busybox alone is ~1 MB).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack.rootfs import build_busybox_rootfs

__all__ = ["ImageSpec", "PushedImage", "build_and_push"]

_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
_CONFIG = "application/vnd.docker.container.image.v1+json"
_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


@dataclass(frozen=True, slots=True)
class ImageSpec:
    repository: str  # e.g. "sandman/busybox"
    tag: str = "1"
    cmd: tuple[str, ...] = ("/bin/sh",)
    padding: int = 0  # bytes of random data in /pad
    seed: int = 0  # the padding's content (a different seed: a different image)


@dataclass(frozen=True, slots=True)
class PushedImage:
    reference: str  # registry/repository:tag
    digest: str  # the manifest's
    size: int  # compressed bytes of the layer


def _layer(spec: ImageSpec) -> bytes:
    """The rootfs as an uncompressed tar with fixed metadata."""
    with tempfile.TemporaryDirectory(prefix="sm-img-") as tmp:
        root = build_busybox_rootfs(Path(tmp) / "rootfs")
        if spec.padding:
            rng = random.Random(spec.seed)
            (root / "pad").write_bytes(rng.randbytes(spec.padding))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(root.rglob("*")):
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if info.isfile():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        return buf.getvalue()


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _request(
    method: str, url: str, body: bytes = b"", ctype: str = ""
) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, data=body if method != "HEAD" else None, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        if method == "HEAD" and e.code == 404:
            return 404, {}
        raise


def _push_blob(base: str, repo: str, data: bytes) -> str:
    digest = _digest(data)
    status, _ = _request("HEAD", f"{base}/v2/{repo}/blobs/{digest}")
    if status == 200:
        return digest
    _, headers = _request("POST", f"{base}/v2/{repo}/blobs/uploads/")
    location = headers["Location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    _request("PUT", f"{location}{sep}digest={digest}", data, "application/octet-stream")
    return digest


def build_and_push(registry: str, spec: ImageSpec) -> PushedImage:
    """Build the image of ``spec`` and push it to ``registry`` (``host:port``, plain HTTP)."""
    raw = _layer(spec)
    layer = gzip.compress(raw, compresslevel=1, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": list(spec.cmd), "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(raw)]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    base, repo = f"http://{registry}", spec.repository
    config_digest = _push_blob(base, repo, config_bytes)
    layer_digest = _push_blob(base, repo, layer)
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MANIFEST,
        "config": {"mediaType": _CONFIG, "size": len(config_bytes), "digest": config_digest},
        "layers": [{"mediaType": _LAYER, "size": len(layer), "digest": layer_digest}],
    }
    body = json.dumps(manifest).encode()
    _request("PUT", f"{base}/v2/{repo}/manifests/{spec.tag}", body, _MANIFEST)
    return PushedImage(f"{registry}/{repo}:{spec.tag}", _digest(body), len(layer))
