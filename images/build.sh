#!/usr/bin/env bash
# `make images`: Sandman's three container images, built here with buildah from a Debian
# base that this script makes itself (debootstrap --variant=minbase: there is no registry to
# pull a base image from). Then `python -m devstack.image_smoke` starts each entry point and
# waits for its health endpoint.
#
#   localhost/sandman-base:bookworm        debootstrap minbase + python3 + python3-venv
#   localhost/sandman/server:TAG           controller + facade (server.Containerfile)
#   localhost/sandman/node-agent:TAG       node agent + daemon bundle (node-agent.Containerfile)
#   localhost/sandman/daemon-bundle:TAG    bundle + busybox-static, FROM scratch
#
# The Debian mirror is the one this machine's apt uses. Needs root (debootstrap, buildah's
# chroot isolation), the Debian packages buildah, debootstrap and busybox-static, and the
# venv (`make venv`: pip for the wheels, PyInstaller for the bundle). Figures: BENCHMARKS.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${IMAGES_OUT:-$root/build/images}
tag=${IMAGE_TAG:-0.1.0}
suite=bookworm
python=$root/.venv/bin/python
ctx=$out/context
mkdir -p "$out"

step() { printf '>> %s (%ss)\n' "$1" "$SECONDS"; }

apt_mirror() {
  local sources=/etc/apt/sources.list.d/debian.sources
  if [ -f "$sources" ]; then
    awk '/^URIs:/ {print $2; exit}' "$sources"
  else
    awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list
  fi
}

base_image() {
  if buildah inspect --type image localhost/sandman-base:$suite >/dev/null 2>&1; then
    step "base image present (buildah rmi localhost/sandman-base:$suite to rebuild)"
    return
  fi
  local rootfs=$out/rootfs
  if [ ! -f "$out/base-$suite.tar" ]; then
    step "debootstrap $suite minbase"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$rootfs" "$(apt_mirror)" \
      >"$out/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
    tar --numeric-owner -C "$rootfs" -cf "$out/base-$suite.tar" .
    rm -rf "$rootfs"
  fi
  step "base image from the rootfs"
  local c
  c=$(buildah from scratch)
  buildah add "$c" "$out/base-$suite.tar" / >/dev/null
  buildah config --env PATH=/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$c"
  buildah commit --quiet --rm "$c" localhost/sandman-base:$suite >/dev/null
}

context() {
  step "wheels and the daemon bundle"
  rm -rf "$ctx" && mkdir -p "$ctx/wheels"
  "$python" -m pip wheel -q --disable-pip-version-check -w "$ctx/wheels" "$root/sdk" "$root" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  "$python" -m daemon.sandbox.bundle build --out "$root/build/daemon-bundle" >/dev/null
  cp -a "$root/build/daemon-bundle" "$ctx/daemon-bundle"
  cp /bin/busybox "$ctx/busybox"
  if readelf -l "$ctx/busybox" | grep -q INTERP; then echo "busybox is not static" >&2; exit 1; fi
}

build() {  # name containerfile
  step "image $1"
  buildah bud --quiet --isolation chroot --layers=false -f "$root/images/$2" \
    -t "localhost/sandman/$1:$tag" "$ctx" >/dev/null
}

base_image
context
build server server.Containerfile
build node-agent node-agent.Containerfile
build daemon-bundle daemon-bundle.Containerfile
step "built"
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -E "sandman" || true
if [ "${SMOKE:-1}" = 1 ]; then
  step "smoke test"
  (cd "$root" && "$python" -m devstack.image_smoke --tag "$tag")
fi
step "done"
