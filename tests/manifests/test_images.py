"""The daemon-bundle image serves every delivery the facade renders: the pod's mount shows
the bundle where the pod command starts it. The image's layout is read from its
Containerfile (images/daemon-bundle.Containerfile), the pod from facade/podspec.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import PurePosixPath

import pytest

from daemon.sandbox import layout
from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from sandman.wire.facade import CreateSandbox
from tests.support.manifests import ROOT

CONTAINERFILE = ROOT / "images" / "daemon-bundle.Containerfile"


def bundle_dir_in_image() -> PurePosixPath:
    """Where the Containerfile copies the bundle (``COPY daemon-bundle/ <dir>/``)."""
    (dest,) = re.findall(r"^COPY daemon-bundle/ (\S+)$", CONTAINERFILE.read_text(), re.M)
    return PurePosixPath(dest)


def pod_for(mode: str) -> dict[str, object]:
    delivery = DaemonDelivery(mode, bundle_image="b:1")  # type: ignore[arg-type]
    request = CreateSandbox(image="task:1", owner="o")
    return render_pod(
        request, SandboxClass(name="tiny"), delivery, name="sb", namespace="ns",
        tenant="t", token="tok", now=datetime.now(UTC),
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["init-container", "image-volume"])
def test_the_pod_command_finds_the_bundle_the_image_ships(mode: str) -> None:
    pod = pod_for(mode)
    spec = pod["spec"]
    assert isinstance(spec, dict)
    (mount,) = spec["containers"][0]["volumeMounts"]
    if mode == "init-container":
        # cp -a <mount>/. /bundle/: the copy takes the image's directory at the mount path.
        copy = spec["initContainers"][0]["command"]
        source = PurePosixPath(copy[-2].removesuffix("/."))
    else:
        # The image's root is the volume; subPath picks a directory of it.
        source = PurePosixPath("/") / mount.get("subPath", "")
    assert source == bundle_dir_in_image()
    daemon = PurePosixPath(spec["containers"][0]["command"][0])
    assert daemon.is_relative_to(PurePosixPath(mount["mountPath"]))
    assert mount["mountPath"] == layout.BUNDLE_MOUNT
