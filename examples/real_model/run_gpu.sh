#!/usr/bin/env bash
# The real-model example on a GPU host, in one call of the device tool (README.md in this folder).
#
# Here, first (the GPU host has torch, triton and transformers but no network, and lacks
# these; wheels for its Python 3.12):
#   rm -rf .whl && .venv/bin/pip wheel -q --no-deps -w .whl . plugins/triton_backend
#   .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_17_x86_64 -d .whl liger-kernel==0.8.5 stevedore pebble \
#       jsonschema jsonschema-specifications referencing rpds-py jsonschema-rs
# Device call:  bash examples/real_model/run_gpu.sh [RUNS]      (carry: .whl; RUNS default 5)
#
# Installs the wheels into /tmp/site (with --target they keep their entry points, which
# plugin discovery needs), then runs bench.py: five rows of RUNS fresh processes each and
# the checks (same tokens as the recorded run, 0 JIT events under `warmkit run`). Its
# recording, results and table come back under $OUT/real_model (commit its run.json as
# examples/real_model/run.json and its table.md into docs/benchmarks.md), and every file,
# logs included, in $OUT/real_model.tar.gz.
set -uo pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
OUT=${OUT:-out}
if [ -d .whl ]; then
    # Byte-compiled, as a user's `pip install` is: the host may set PYTHONDONTWRITEBYTECODE,
    # and then every process would compile warmkit and the carried libraries from source again.
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch, triton, transformers, liger_kernel; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" || exit 1
# COMPARE=DIR: DIR holds other wheels of warmkit and its plugins (say, main's): installed with
# the rest of .whl/ into their own site, for one more row of `warmkit run` (an A/B of a change).
if [ -n "${COMPARE:-}" ]; then
    rm -rf /tmp/compare-wheels /tmp/site-compare && mkdir /tmp/compare-wheels &&
        cp .whl/*.whl /tmp/compare-wheels/ && rm -f /tmp/compare-wheels/warmkit*.whl &&
        cp "$COMPARE"/warmkit*.whl /tmp/compare-wheels/ &&
        python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
            --target /tmp/site-compare /tmp/compare-wheels/*.whl || exit 1
fi
# SECONDS_LIMIT=S: no turn of the rows starts that would end past S s (bench.py --seconds).
# NO_OPT_IN=1: without the WARMKIT_TRITON_TORCH_START row (bench.py --no-opt-in).
# PYCACHE=1: every process with one Python bytecode cache (bench.py --pycache).
# PROFILE=N: also py-spy profiles of N warm runs with and N without warmkit (py-spy's wheel in .whl/)
python3 examples/real_model/bench.py --runs "${1:-5}" --out "$OUT/real_model" \
    ${PROFILE:+--profile /tmp/site/bin/py-spy --profile-runs "$PROFILE"} ${MANIFEST:+--manifest "$MANIFEST"} ${OTHER_RUNS:+--other-runs "$OTHER_RUNS"} ${SECONDS_LIMIT:+--seconds "$SECONDS_LIMIT"} ${NO_OPT_IN:+--no-opt-in} ${PYCACHE:+--pycache} \
    ${COMPARE:+--compare /tmp/site-compare}
rc=$?
# FIRST_REQUEST=N: then first_request.py, N turns of its modes (FIRST_REQUEST_SECONDS=S: none
# that would end past S s), into $OUT/real_model/first_request.
if [ -n "${FIRST_REQUEST:-}" ]; then
    python3 examples/real_model/first_request.py --runs "$FIRST_REQUEST" \
        --out "$OUT/real_model/first_request" \
        ${FIRST_REQUEST_SECONDS:+--seconds "$FIRST_REQUEST_SECONDS"} || rc=1
fi
rm -f "$OUT"/real_model/rec-[1-9]*.json  # the first recording is run.json; the rest only timed
# The device tool brings back only a few files per call: everything goes into one archive, and
# only what is committed or read first (results.json, table.md, run.json) stays beside it.
tar -czf "$OUT/real_model.tar.gz" -C "$OUT" real_model &&
    find "$OUT/real_model" -type f ! -name results.json ! -name table.md ! -name run.json -delete
exit $rc
