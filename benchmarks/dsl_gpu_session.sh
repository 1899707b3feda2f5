#!/usr/bin/env bash
# The TileLang/CuTe DSL GPU work, on the H200, after the wheels made by dsl_wheels.sh travelled.
#
# A carried ignored path is gone in the next call, but /tmp on the machine stays while it is warm
# (about 30 s after a call; ../shared/notes/device.md), so carry one folder a call, back to back
# (each < 64 MiB with the working tree), each copied to /tmp/dsl:
#   call 1: carry [".whl-dsl/1"]  command: mkdir -p /tmp/dsl && cp -r .whl-dsl/1 /tmp/dsl/
#   call 2: carry [".whl-dsl/2"]  command: cp -r .whl-dsl/2 /tmp/dsl/
#   call 3: carry [".whl-dsl/3"]  command: cp -r .whl-dsl/3 /tmp/dsl/ && rm -rf .whl-dsl &&
#           ln -s /tmp/dsl .whl-dsl && bash benchmarks/dsl_gpu_session.sh
#   call 4 (optional, the same warm machine, nothing carried):
#           ln -s /tmp/dsl .whl-dsl && bash benchmarks/dsl_gpu_session.sh libs
#           TileLang's rows of benchmarks/real_libraries.py (~4-5 min): its warm restarts and a
#           bundle against TileLang alone on its warm cache (the wheels are installed once),
#           then dsl_startup.py (B2 for TileLang: a warm restart against a cold start). It needs
#           folders 1 and 2 only: with little device time left, call 2 can run it instead
#           (cp -r .whl-dsl/2 /tmp/dsl/ && rm -rf .whl-dsl && ln -s /tmp/dsl .whl-dsl && ...),
#           and a later full session installs again (rm /tmp/site-dsl/.installed first).
# It reassembles the split wheel, installs everything into /tmp/site-dsl, runs the DSL GPU tests,
# installs the CPU-built bundle into an empty cache (new process: 0 compiles), and the
# measurements of benchmarks/dsl_startup.py. Everything lands in $OUT/dsl-results.tar.gz.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/dsl}
RES=$(mktemp -d)
mkdir -p "$OUT" /tmp/whl-dsl
# `libs` needs TileLang only: folders 1 and 2 (folder 3 is the rest of CuTe DSL's libraries).
needed=".whl-dsl/1 .whl-dsl/2"
[ "${1:-}" = libs ] || needed="$needed .whl-dsl/3"
for d in $needed; do
    [ -d "$d" ] || { echo "missing $d: carry it in an earlier call of this warm machine"; exit 1; }
done
cp .whl-dsl/1/*.whl .whl-dsl/2/*.whl /tmp/whl-dsl/
if [ -d .whl-dsl/3 ]; then
    cat .whl-dsl/2/*.part00 .whl-dsl/3/*.part01 .whl-dsl/3/*.part02 \
        > "/tmp/whl-dsl/$(basename .whl-dsl/2/*.part00 .part00)"
fi
# Byte-compiled, as a user's `pip install` is: the host may set PYTHONDONTWRITEBYTECODE, and
# then every process would compile warmkit and the carried libraries from source again.
# Once per warm machine: a later call (`libs`) finds them installed.
if [ ! -f /tmp/site-dsl/.installed ]; then
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
        --target /tmp/site-dsl /tmp/whl-dsl/*.whl || exit 1
    touch /tmp/site-dsl/.installed
fi
# nvidia_cutlass_dsl finds its packages through a .pth file, which --target does not process.
export PYTHONPATH=/tmp/site-dsl:/tmp/site-dsl/nvidia_cutlass_dsl/dsl_packages:$PWD/tests
python3 -c "import sys, torch, tilelang; print('python', sys.version.split()[0], 'torch', torch.__version__, 'tilelang', tilelang.__version__)" | tee "$RES/machine.txt"

step() {  # step NAME TIMEOUT_S COMMAND...
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$RES/$name.log" 2>&1
    echo "=== $name: rc=$? in $((SECONDS - t0)) s: $*"
    tail -n "${TAIL:-15}" "$RES/$name.log"
    tar -czf "$OUT/dsl-results.tar.gz" -C "$RES" .
}

if [ "${1:-}" = libs ]; then  # the warm path's measures alone, no tests
    # .whl-dsl/1/prev/ (optional): wheels of another build of warmkit and warmkit-tilelang (say,
    # main's, for an A/B of a change): installed alone, ahead of the rest on PYTHONPATH (the
    # first distribution of a name on the path is the one imported and whose entry points
    # load), one more timed row.
    compare=()
    if compgen -G ".whl-dsl/1/prev/*.whl" > /dev/null; then
        rm -rf /tmp/site-prev && python3 -m pip install -q --no-index --no-deps --no-cache-dir \
            --target /tmp/site-prev .whl-dsl/1/prev/*.whl || exit 1
        compare=(--compare "/tmp/site-prev:$PYTHONPATH")
    fi
    TAIL=20 step real_libraries_tilelang "${LIBS_LIMIT:-400}" python3 benchmarks/real_libraries.py \
        --libs tilelang --runs "${RUNS:-5}" --out "$RES/real_libraries" "${compare[@]}"
    TAIL=8 step tilelang_startup 170 python3 benchmarks/dsl_startup.py --out "$RES/dsl_startup.json"
    echo "results: $OUT/dsl-results.tar.gz"
    exit 0
fi
step tilelang_gpu_tests 240 python3 -m pytest -q -p no:cacheprovider -rs tests/tilelang_backend/test_gpu.py
[ -f tests/cutedsl_backend/test_gpu.py ] && step cutedsl_gpu_tests 180 python3 -m pytest -q -p no:cacheprovider -rs tests/cutedsl_backend/test_gpu.py
# A bundle built on the CPU box for cuda:90, into an empty cache; then a new process: 0 compiles.
step cpu_bundle 240 bash -c '
    export TILELANG_CACHE_DIR=$(mktemp -d)
    python3 -m warmkit bundle install .whl-dsl/1/tilelang-gemm-sm90a.wkb --json &&
    python3 - <<PY
import json, warmkit
reg = warmkit.WarmupRegistry.load(".whl-dsl/1/tilelang-gemm.json")
warmkit.monitor.arm("error")
report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), reg)
print(json.dumps({"statuses": [e.status for e in report.entries], "events": len(warmkit.monitor.events())}))
PY'
TAIL=8 step tilelang_startup 400 python3 benchmarks/dsl_startup.py --out "$RES/dsl_startup.json"
echo "results: $OUT/dsl-results.tar.gz"
