#!/usr/bin/env bash
# A throw-away, single-node Ceph RGW (a real S3 server) on loopback, for tests and local runs.
#
#   infra/s3/ceph_rgw.sh start DIR [RGW_PORT] [MON_PORT]   # prints S3 env lines (export-able)
#   infra/s3/ceph_rgw.sh stop DIR                          # kills the daemons, removes DIR
#
# One monitor, one OSD on memstore (data lives in RAM: nothing survives `stop`), radosgw with
# the beast frontend, auth none, pool size 1. Everything (config, sockets, logs, pid files) stays
# under DIR, so several clusters can run side by side on one machine with different ports.
# Needs Debian's packages:
#   apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd
# Environment knobs: RGW_ACCESS_KEY, RGW_SECRET_KEY (the S3 user's keys), RGW_MEMSTORE_BYTES
# (RAM for the OSD, default 2 GiB). Buckets are created by the caller (aws s3 mb, boto3).
# Up in ~13 s on 2 cores.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start|stop DIR [RGW_PORT] [MON_PORT]" >&2; exit 2; }

free_port() {  # ask the kernel for a free loopback port (racy, but good enough on one machine)
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
    local d=$1 pidf pids=()
    [[ -d "$d" ]] || return 0
    # memstore keeps nothing worth a clean shutdown: TERM all daemons at once, KILL stragglers.
    for name in client.rgw.gw osd.0 mon.a; do
        pidf="$d/run/$name.pid"
        [[ -f "$pidf" ]] && pids+=("$(cat "$pidf")")
    done
    if ((${#pids[@]})); then
        kill "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 30); do
            kill -0 "${pids[@]}" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "${pids[@]}" 2>/dev/null || true
    fi
    rm -rf "$d"
}

start() {
    local d rgw_port mon_port fsid conf osd_uuid access secret
    mkdir -p "$dir"; d=$(cd "$dir" && pwd)
    rgw_port=${1:-$(free_port)}; mon_port=${2:-$(free_port)}
    access=${RGW_ACCESS_KEY:-selfplay-access}; secret=${RGW_SECRET_KEY:-selfplay-secret-key}
    fsid=$(cat /proc/sys/kernel/random/uuid); osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    conf="$d/ceph.conf"
    mkdir -p "$d"/{run,log,mon/ceph-a,osd/ceph-0,rgw,crash}
    cat > "$conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$mon_port]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
# Without these, radosgw loops on an auth error for 300 s (ENVIRONMENT.md).
ms mon client mode = crc
ms client mode = crc
ms mon cluster mode = crc
ms cluster mode = crc
ms service mode = crc
ms mon service mode = crc
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
# radosgw creates ~8 pools; keep their placement groups few so one OSD may hold them all.
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = ${RGW_MEMSTORE_BYTES:-2147483648}
run dir = $d/run
crash dir = $d/crash
pid file = $d/run/\$name.pid
admin socket = $d/run/\$name.asok
log file = $d/log/\$name.log
mon data = $d/mon/\$cluster-\$id
osd data = $d/osd/\$cluster-\$id
rgw data = $d/rgw
keyring = $d/keyring
[client.rgw.gw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw enable usage log = false
CONF
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$d/monmap" >/dev/null
    ceph-mon -c "$conf" --mkfs -i a --monmap "$d/monmap" >/dev/null
    ceph-mon -c "$conf" -i a
    ceph -c "$conf" --connect-timeout 30 osd new "$osd_uuid" >/dev/null
    ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >/dev/null 2>&1
    ceph-osd -c "$conf" -i 0 >/dev/null 2>&1
    radosgw -c "$conf" -n client.rgw.gw
    # The gateway answers once its pools exist; an anonymous GET / returns 200 with an empty list.
    local ok=""
    for _ in $(seq 240); do
        if python3 - "$rgw_port" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2)
PY
        then ok=1; break; fi
        sleep 0.5
    done
    [[ -n "$ok" ]] || { echo "radosgw did not answer on 127.0.0.1:$rgw_port within 120 s; logs in $d/log" >&2; exit 1; }
    radosgw-admin -c "$conf" user create --uid=selfplay --display-name=selfplay \
        --access-key="$access" --secret-key="$secret" >/dev/null
    cat <<ENV
S3_ENDPOINT_URL=http://127.0.0.1:$rgw_port
AWS_ACCESS_KEY_ID=$access
AWS_SECRET_ACCESS_KEY=$secret
AWS_DEFAULT_REGION=us-east-1
CEPH_CONF=$conf
ENV
}

case "$cmd" in
    start) shift 2; start "$@" ;;
    stop) stop "$dir" ;;
    *) echo "unknown command: $cmd (start|stop)" >&2; exit 2 ;;
esac
