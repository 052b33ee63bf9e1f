#!/usr/bin/env bash
# Build the executor image (selfplay-executor:latest) without any registry: debootstrap a
# minimal Debian root file system with python3, trim it, and `docker import` it with the same
# settings as infra/executor.Dockerfile (user 65534, PATH, workdir /tmp).
#
#   sudo infra/build_executor_image.sh                     # debootstrap from deb.debian.org
#   MIRROR=http://my-mirror/debian sudo infra/build_executor_image.sh
#   ROOTFS=/path/to/existing/rootfs sudo infra/build_executor_image.sh   # reuse a root fs dir
#   ROOTFS_TAR=rootfs.tar sudo infra/build_executor_image.sh            # import a tarball
#
# Needs: root, docker (a running daemon), debootstrap (apt-get install -y debootstrap) unless
# ROOTFS/ROOTFS_TAR is given.
set -euo pipefail

TAG=${TAG:-selfplay-executor:latest}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
IMPORT_OPTS=(-c 'USER 65534:65534' -c 'ENV PATH=/usr/bin:/bin LANG=C.UTF-8'
             -c 'WORKDIR /tmp' -c 'CMD ["python3"]')

die() { echo "build_executor_image: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker CLI not found (apt-get install -y docker.io)"
docker info >/dev/null 2>&1 || die "no Docker daemon answers; start dockerd first (infra/README.md)"

if [[ -n "${ROOTFS_TAR:-}" ]]; then
    docker import "${IMPORT_OPTS[@]}" "$ROOTFS_TAR" "$TAG" >/dev/null
else
    [[ $(id -u) -eq 0 ]] || die "run as root (debootstrap and chroot need it)"
    if [[ -z "${ROOTFS:-}" ]]; then
        command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install -y debootstrap)"
        ROOTFS=$(mktemp -d /var/tmp/selfplay-rootfs.XXXXXX)
        trap 'rm -rf "$ROOTFS"' EXIT
        echo "debootstrap $SUITE (minbase + python3) from $MIRROR into $ROOTFS ..."
        debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOTFS" "$MIRROR" >/dev/null \
            || die "debootstrap failed (mirror $MIRROR reachable?)"
    fi
    [[ -x "$ROOTFS/usr/bin/python3" ]] || die "$ROOTFS has no usr/bin/python3"
    # Byte-compile the stdlib once, so the read-only container never compiles at start-up.
    chroot "$ROOTFS" /usr/bin/python3 -m compileall -q -j 0 /usr/lib/python3 /usr/lib/python3.* >/dev/null 2>&1 || true
    # Only what running python3 needs: drop package caches, docs, manuals and locales.
    rm -rf "$ROOTFS"/var/cache/apt/* "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/* \
           "$ROOTFS"/usr/share/doc "$ROOTFS"/usr/share/man "$ROOTFS"/usr/share/info \
           "$ROOTFS"/usr/share/locale "$ROOTFS"/tmp/* "$ROOTFS"/root/.cache
    tar --numeric-owner -C "$ROOTFS" -c . | docker import "${IMPORT_OPTS[@]}" - "$TAG" >/dev/null
fi

# Smoke test with the executor's own restrictions.
docker run --rm --network none --read-only --user 65534:65534 --cap-drop ALL \
    --security-opt no-new-privileges "$TAG" python3 -I -S -c \
    'import sys, json; assert sys.version_info >= (3, 11), sys.version; print("ok", sys.version.split()[0])' \
    || die "image $TAG does not run python3 >= 3.11"
docker image ls "$TAG"
