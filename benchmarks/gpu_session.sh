#!/usr/bin/env bash
# Everything that needs the H200, in one call of the device tool (docs/benchmarks.md).
#
# Here, first:   .venv/bin/pip wheel -q --no-deps -w .whl . plugins/triton_backend plugins/blocktable
#                (plus stevedore's and jsonschema-rs's wheels in .whl/, which the GPU machine lacks:
#                .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12
#                --platform manylinux_2_17_x86_64 -d .whl jsonschema-rs  (abi3; without it manifests
#                are validated by jsonschema alone, ~300 us per registration); and for B11's
#                third-party autotuned kernel: pip download --no-deps -d .whl fla-core==0.6.0 einops,
#                and for B9's raw kernels: pip download --no-deps -d .whl liger-kernel==0.8.5;
#                for B9 fleet: .venv/bin/pip wheel -q --no-deps -w .whl redis, and a redis-server:
#                mkdir -p .redis && cp /usr/bin/redis-check-rdb .redis/redis-server &&
#                cp /lib/x86_64-linux-gnu/liblzf.so.1 /lib/x86_64-linux-gnu/libjemalloc.so.2 .redis/)
# Device calls:  bash benchmarks/gpu_session.sh            (carry: .whl) B4, B5, B8 and the GPU tests
#                bash benchmarks/gpu_session.sh startup    (carry: .whl) B1-B3: ~7 min on the H200 host
#                                                          (JOBS=1 WARM_RUNS=5: B2 and B3 alone, ~5 min)
#                bash benchmarks/gpu_session.sh startup b2 (carry: .whl) B2 with and without
#                                                          warmkit.prepare(), and a profile: ~7 min
#                bash benchmarks/gpu_session.sh startup b3 (carry: .whl) B3 against B2 on the synthetic
#                                                          workload, and a profile of each: ~2 min
#                bash benchmarks/gpu_session.sh perf       (carry: .whl) B1 threads vs worker processes,
#                                                          B5 (memoized dispatch): ~9 min
#                bash benchmarks/gpu_session.sh scale      (carry: .whl) B10 on the host's quieter CPUs
#                (pebble's wheel must be in .whl/ too: warmkit depends on it)
#                bash benchmarks/gpu_session.sh autotune   (carry: .whl) B11 and the autotune GPU test
#                bash benchmarks/gpu_session.sh record     (carry: .whl) B9 (record/replay) and its GPU test
#                bash benchmarks/gpu_session.sh fleet      (carry: .whl, .redis) B9 fleet: 4 ranks, one host
#                bash benchmarks/gpu_session.sh real_libraries  (carry: .whl; LIBS=fla,liger) #30: warm
#                                                          starts on real libraries against Triton alone
#                                                          (benchmarks/real_libraries.py; ~5 min per
#                                                          library). Its wheels, from metadata:
#                                                          benchmarks/wheel_deps.py --python 3.12 warmkit
#                                                          warmkit-triton liger-kernel, plus fla-core==0.6.0
#                                                          (it needs only torch, triton, einops: on the image)
#                bash benchmarks/gpu_session.sh multigpu   (carry: .whl, .redis; kind nvidia-h200-x2) B12:
#                                                          examples/serve_ranks.py, 2 ranks on 2 GPUs, its
#                                                          4 configurations x 1000 steps, and its GPU test
#                                                          (~2-4 min expected; step limits 360 + 150 s)
#
# Writes every log and JSON into $OUT/gpu-results.tar.gz and prints a summary.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu}
RES=$(mktemp -d)
mkdir -p "$OUT"
# Byte-compiled, as a user's `pip install` is: the host may set PYTHONDONTWRITEBYTECODE, and
# then every process would compile warmkit and the carried libraries from source again.
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
    python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
    nproc
} > "$RES/machine.txt" 2>&1
cat "$RES/machine.txt"

step() {  # step NAME TIMEOUT_S COMMAND...: run, keep the log, print its tail, re-pack $OUT
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$RES/$name.log" 2>&1
    echo "=== $name: rc=$? in $((SECONDS - t0)) s: $*"
    tail -n "${TAIL:-18}" "$RES/$name.log"
    # Re-packed after every step: a call cut short still brings back what finished.
    tar -czf "$OUT/gpu-results.tar.gz" -C "$RES" .
}

if [ "${1:-}" = startup ] && [ "${2:-}" = b2 ]; then
    # B2 (#14, raised to <= 5 %): jobs=1, both workloads, 5 runs, with the contrasts (the same
    # engine without warmkit.prepare(), cold and warm; WARMKIT_TRITON_KEY_CACHE=0): ~6 min.
    # Then a cProfile of one demo warm restart on the kept cache: what is left in the warmup.
    KEEP=$(mktemp -d)
    TAIL=30 step b2_startup 500 python3 benchmarks/startup.py --jobs 1 --runs 5 \
        --keep "$KEEP" --out "$RES/b2.json"
    TARGET=$(python3 -c "import json; print(json.load(open('$RES/b2.json'))['results']['target'])" \
        2>/dev/null || echo cuda:90)
    TAIL=5 step b2_demo_profile 40 env STARTUP_PROFILE="$RES/b2_demo_profile.txt" \
        TRITON_CACHE_DIR="$KEEP/demo-r0-cold1" XDG_CACHE_HOME="$KEEP/demo-r0-xdg1" \
        python3 benchmarks/startup.py --child "$KEEP/demo-warmup.json" --target "$TARGET"
    head -n 60 "$RES/b2_demo_profile.txt"
    rm -rf "$KEEP"
elif [ "${1:-}" = startup ] && [ "${2:-}" = b3 ]; then
    # B3 vs B2 on the synthetic workload: one run kept on disk, then a cProfile of one warm
    # restart (B2's cache) and of one warmup on the installed CPU-built bundle (B3's), each
    # twice: what the bundle's warmup does that the restart does not.
    KEEP=$(mktemp -d)
    TAIL=8 step b3_startup 300 python3 benchmarks/startup.py --jobs 1 --runs 5 --warm-runs 1 \
        --no-contrast --workloads synthetic --keep "$KEEP" --out "$RES/b3.json"
    TARGET=$(python3 -c "import json; print(json.load(open('$RES/b3.json'))['results']['target'])" \
        2>/dev/null || echo cuda:90)
    for i in 1 2; do
        TAIL=3 step "b2_profile_$i" 60 env STARTUP_PROFILE="$RES/b2_profile_$i.txt" \
            TRITON_CACHE_DIR="$KEEP/synthetic-r0-cold1" XDG_CACHE_HOME="$KEEP/synthetic-r0-xdg1" \
            python3 benchmarks/startup.py --child "$KEEP/synthetic-warmup.json" --target "$TARGET"
        TAIL=3 step "b3_profile_$i" 60 env STARTUP_PROFILE="$RES/b3_profile_$i.txt" \
            TRITON_CACHE_DIR="$KEEP/synthetic-r0-installed/elsewhere" \
            XDG_CACHE_HOME="$KEEP/synthetic-r0-xdg3" \
            python3 benchmarks/startup.py --child "$KEEP/synthetic-warmup.json" --target "$TARGET"
    done
    head -n 45 "$RES/b2_profile_2.txt" "$RES/b3_profile_2.txt"
    rm -rf "$KEEP"
elif [ "${1:-}" = startup ]; then
    # ~65 fresh processes, each importing torch: it needs a device call of its own.
    # STARTUP_PREPARE=1: each child's warmkit.prepare() starts its jobs' workers, as an engine's does
    TAIL=45 step b1_b3_startup 570 env STARTUP_PREPARE=1 python3 benchmarks/startup.py --jobs "${JOBS:-1,2,4,8}" \
        --runs 5 --warm-runs "${WARM_RUNS:-3}" --no-contrast --out "$RES/b1_b3.json"
elif [ "${1:-}" = perf ]; then
    # B1: jobs=1 vs 8 on the 32 synthetic keys, threads, then worker processes started with
    # the child's startup (warmkit.prepare); then B5.
    TAIL=8 step b1_threads 250 env WARMKIT_COMPILE_PROCESSES=off python3 benchmarks/startup.py \
        --jobs 1,8 --runs 5 --warm-runs 1 --no-contrast --workloads synthetic --out "$RES/b1_threads.json"
    TAIL=8 step b1_processes 250 env WARMKIT_COMPILE_PROCESSES=on STARTUP_PREPARE=1 \
        python3 benchmarks/startup.py --jobs 1,8 --runs 5 --warm-runs 1 --no-contrast \
        --workloads synthetic --out "$RES/b1_processes.json"
    step b5_launch 60 python3 benchmarks/launch_overhead.py --out "$RES/b5.json"
elif [ "${1:-}" = scale ]; then
    # B10 needs no GPU, only CPUs quieter than the shared 2-core box.
    TAIL=16 step b10_scale 560 python3 benchmarks/scale.py --runs 5 --out "$RES/b10_scale.json"
elif [ "${1:-}" = autotune ]; then
    # B11: ~22 fresh processes (device warmup jobs=1 vs N, GPU-built bundle served, cold contrast).
    TAIL=20 step b11_autotune 420 python3 benchmarks/autotune.py --runs 5 --out "$RES/b11.json"
    step autotune_gpu_test 170 python3 -m pytest -q -p no:cacheprovider -rs \
        tests/triton_backend/test_autotune.py -k gpu
elif [ "${1:-}" = record ]; then
    # B9: six fresh processes importing torch, plus a CUDA-hidden bundle build.
    TAIL=30 step b9_record_replay 420 python3 benchmarks/record_replay.py --runs 5 --out "$RES/b9.json"
    step record_gpu_test 150 python3 -m pytest -q -p no:cacheprovider -rs \
        tests/triton_backend/test_record_gpu.py
elif [ "${1:-}" = fleet ]; then
    # B9 on one host: R=4 ranks sharing this host's cache, without and with a loopback Redis.
    export PATH="$PWD/.redis:$PATH" LD_LIBRARY_PATH="$PWD/.redis${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    TAIL=12 step b9_fleet_none 280 python3 benchmarks/fleet.py --hosts 1 --ranks 4 --store none \
        --out "$RES/b9_none.json"
    TAIL=12 step b9_fleet_redis 280 python3 benchmarks/fleet.py --hosts 1 --ranks 4 --store redis \
        --out "$RES/b9_redis.json"
elif [ "${1:-}" = real_libraries ]; then
    # PROFILE=1: also a py-spy profile of a warm restart per jobs setting (py-spy's wheel in .whl/);
    # RUNS=0 PROFILE=1: the profiles alone. RECORDINGS=DIR: replay DIR/<lib>_run.json (recorded if absent).
    # COMPARE=DIR: DIR holds other wheels of warmkit and its plugins (say, main's, for an A/B of
    # a change): installed with the rest of .whl/ into their own site, one more timed row.
    if [ -n "${COMPARE:-}" ]; then
        rm -rf /tmp/compare-wheels /tmp/site-compare && mkdir /tmp/compare-wheels &&
            cp .whl/*.whl /tmp/compare-wheels/ &&
            rm -f /tmp/compare-wheels/warmkit*.whl && cp "$COMPARE"/warmkit*.whl /tmp/compare-wheels/ &&
            python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
                --target /tmp/site-compare /tmp/compare-wheels/*.whl || exit 1
    fi
    TAIL=40 step real_libraries 590 python3 benchmarks/real_libraries.py --runs "${RUNS:-5}" \
        --libs "${LIBS:-fla,liger}" --out "$RES/real_libraries" \
        ${PROFILE:+--profile /tmp/site/bin/py-spy} ${RECORDINGS:+--recordings "$RECORDINGS"} \
        ${COMPARE:+--compare /tmp/site-compare}
elif [ "${1:-}" = multigpu ]; then
    # B12 (#15): one process per GPU; NVLink multicast off here and in every rank's environment.
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export PATH="$PWD/.redis:$PATH" LD_LIBRARY_PATH="$PWD/.redis${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader >> "$RES/machine.txt" 2>&1
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$RES/redis"
    redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --dir "$RES/redis" \
        > "$RES/redis.log" 2>&1 &
    REDIS_PID=$!
    python3 -c "import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(('127.0.0.1', $PORT), timeout=0.2).close(); sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit('redis-server did not start')" || exit 1
    # cold (a cache per rank, no store), shared (one TRITON_CACHE_DIR), store (a cache per rank +
    # this empty Redis), warm (a restart on the shared cache); rc=1 if any check failed.
    TAIL=45 step b12_multigpu 360 python3 examples/serve_ranks.py --ranks 2 --device cuda \
        --steps 1000 --store "redis://127.0.0.1:$PORT/0" --json "$RES/b12_multigpu.json"
    kill "$REDIS_PID"
    step multigpu_test 150 python3 -m pytest -q -p no:cacheprovider -rs \
        tests/blocktable/test_serve_ranks.py -k two_gpus
else
    # B4 with its profile (warmkit-profile: each call's C launch and the Python above it); the
    # compile-only contrast (the vLLM way) is measured by: B4_MODES=...,compile-only
    TAIL=50 step b4_first_launch 330 python3 benchmarks/first_launch.py --runs 5 \
        --modes "${B4_MODES:-warmkit,warmkit-launched,warmkit-profile}" --out "$RES/b4.json"
    step b5_launch 60 python3 benchmarks/launch_overhead.py --out "$RES/b5.json"
    step b8_demo 60 python3 examples/serve.py --steps 1000 --json "$RES/b8.json"
    step gpu_tests 240 python3 -m pytest -q -p no:cacheprovider -rs \
        tests/triton_backend/test_gpu.py tests/blocktable/test_gpu.py
    # the Triton layer's canary on the GPU's Triton (3.6): every accessor, and the two launch paths
    step triton_api_canary 120 python3 -m pytest -q -p no:cacheprovider -rs \
        tests/triton_backend/test_triton_api.py
fi
echo "results: $OUT/gpu-results.tar.gz"
