#!/bin/sh
# The system packages `make run` and `make test` need, installed when missing (Debian/Ubuntu).
#
#   sh infra/system-packages.sh run    # bubblewrap: the sandbox's namespaces
#   sh infra/system-packages.sh test   # + Ceph RGW (a real S3 server for the storage tests),
#                                      #   docker-compose (validates infra/docker-compose.yml) and
#                                      #   chromium (the UI tests render pages headless)
#
# Also python3-venv when $PYTHON cannot create a venv yet (Debian ships Python without ensurepip).
# Runs apt-get as root, through sudo when not root and sudo exists; otherwise prints the one
# command to run and exits 1. SELFPLAY_SKIP_SYSTEM_PACKAGES=1 skips every check (e.g. a machine
# whose packages are managed otherwise; the sandbox then warns that it cannot isolate).
#
# Only shell built-ins, `id`, `apt-get` and `sudo` are used, all looked up on PATH, so a test
# can run this against recording fakes (tests/infra/test_system_packages.py).
set -u

what=${1:-run}
case $what in
    run|test) ;;
    *) echo "usage: sh infra/system-packages.sh run|test" >&2; exit 2 ;;
esac
[ "${SELFPLAY_SKIP_SYSTEM_PACKAGES:-0}" = 1 ] && exit 0

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

# "<command> <package>" pairs: the package that provides each command.
needs="bwrap:bubblewrap"
if [ "$what" = test ]; then
    # The commands infra/s3/ceph_rgw.sh runs, and the compose file's validator.
    needs="$needs radosgw:radosgw radosgw-admin:radosgw ceph-mon:ceph-mon monmaptool:ceph-mon"
    needs="$needs ceph:ceph-mon ceph-osd:ceph-osd docker-compose:docker-compose"
    # Headless Chromium: the UI tests look at the Prefect and MLflow pages as a person would.
    needs="$needs chromium:chromium"
fi

missing_cmds=""
packages=""
add_package() {
    case " $packages " in *" $1 "*) ;; *) packages="${packages:+$packages }$1" ;; esac
}
check() {
    missing_cmds=""
    packages=""
    for pair in $needs; do
        cmd=${pair%%:*}
        if ! command -v "$cmd" >/dev/null 2>&1; then
            missing_cmds="${missing_cmds:+$missing_cmds, }$cmd"
            add_package "${pair#*:}"
        fi
    done
    if [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c "import ensurepip" >/dev/null 2>&1; then
        missing_cmds="${missing_cmds:+$missing_cmds, }$PYTHON -m venv"
        add_package python3-venv
    fi
}

check
[ -z "$packages" ] && exit 0

install="apt-get install -y --no-install-recommends $packages"
fail() {
    echo "" >&2
    echo "make $what needs system packages that are missing: $packages" >&2
    echo "  (for: $missing_cmds)" >&2
    echo "$1" >&2
    echo "then run \`make $what\` again (or set SELFPLAY_SKIP_SYSTEM_PACKAGES=1 to go on without them)." >&2
    exit 1
}

if ! command -v apt-get >/dev/null 2>&1; then
    fail "No apt-get on this machine: install the equivalent packages with its package manager,"
fi
if [ "$(id -u 2>/dev/null)" = 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    fail "Not root and no sudo here: as root, run
    $install"
fi

export DEBIAN_FRONTEND=noninteractive
apt_get() {
    if [ -z "$as_root" ]; then apt-get "$@"; else sudo DEBIAN_FRONTEND=noninteractive apt-get "$@"; fi
}
echo "installing system packages for make $what: $packages (${as_root:+sudo }apt-get, about a minute) ..."
# A fresh machine may have no package lists yet: on failure, update them and try once more.
# shellcheck disable=SC2086  # $packages is a list of words
if ! apt_get install -y --no-install-recommends $packages; then
    echo "apt-get install failed; updating the package lists and trying again ..."
    { apt_get update && apt_get install -y --no-install-recommends $packages; } \
        || fail "The install failed (see apt-get's messages above). Run it yourself:
    ${as_root:+sudo }$install"
fi

check
if [ -n "$packages" ]; then
    fail "apt-get finished, but still missing: $missing_cmds. Install by hand:
    ${as_root:+sudo }$install"
fi
echo "system packages installed."
