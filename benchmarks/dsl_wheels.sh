#!/usr/bin/env bash
# Here (the CPU box, with pip): the DSL wheels for the H200 (CPython 3.12, manylinux x86_64),
# grouped into folders of < 60 MiB so that each device call carries one (64 MiB per call).
#
#   bash benchmarks/dsl_wheels.sh [DEST]      (DEST default: .whl-dsl, ignored by git)
#
# DEST/1: tilelang, apache-tvm-ffi, torch-c-dlpack-ext, nvidia-cutlass-dsl(+libs-core),
#         this repo's warmkit, warmkit-tilelang, warmkit-cutedsl, and every other dependency
#         (benchmarks/wheel_deps.py: jsonschema and its own, stevedore, pebble, ...); and a
#         bundle of TiledGemm built here for cuda:90 (sm_90a) with no GPU.
# DEST/2: z3-solver, nvidia-cutlass-dsl-libs-base, nvidia-cutlass-dsl-libs-cu12 part 1 of 3
# DEST/3: nvidia-cutlass-dsl-libs-cu12 parts 2 and 3
# The H200 image already has torch, cuda-bindings, cloudpickle, ml-dtypes, psutil, numpy, tqdm,
# attrs and nvcc 13.0 (TileLang uses it), so none of those travel.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl-dsl}
rm -rf "$DEST" && mkdir -p "$DEST/1" "$DEST/2" "$DEST/3" "$DEST/dl"
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# Every dependency, from the packages' own Requires-Dist (resolved recursively, at the versions
# installed here, minus what the H200 image has): a hand-kept list once missed jsonschema.
mapfile -t WHEELS < <(.venv/bin/python benchmarks/wheel_deps.py warmkit warmkit-tilelang \
    warmkit-cutedsl tilelang nvidia-cutlass-dsl)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLAT[@]}" -d "$DEST/dl" "${WHEELS[@]}"
.venv/bin/pip wheel -q --no-deps -w "$DEST/1" . plugins/tilelang_backend
[ -d plugins/cutedsl_backend ] && .venv/bin/pip wheel -q --no-deps -w "$DEST/1" plugins/cutedsl_backend
mv "$DEST"/dl/z3_solver-*.whl "$DEST"/dl/nvidia_cutlass_dsl_libs_base-*.whl "$DEST/2/"
cu12=$(ls "$DEST"/dl/nvidia_cutlass_dsl_libs_cu12-*.whl)
split -n 3 -d "$cu12" "$DEST/2/$(basename "$cu12").part"
mv "$DEST/2/$(basename "$cu12").part01" "$DEST/2/$(basename "$cu12").part02" "$DEST/3/"
rm "$cu12"
mv "$DEST"/dl/*.whl "$DEST/1/"
rmdir "$DEST/dl"
# The CPU-built bundle for the "install into an empty cache, 0 compiles" step.
.venv/bin/python - "$DEST/1" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from _common import TILED_GEMM_SHAPES, tiled_gemm_registry
tiled_gemm_registry(TILED_GEMM_SHAPES).save(f"{sys.argv[1]}/tilelang-gemm.json")
PY
TILELANG_CACHE_DIR=$(mktemp -d) .venv/bin/python -m warmkit bundle build "$DEST/1/tilelang-gemm.json" \
    --target cuda:90 -o "$DEST/1/tilelang-gemm-sm90a.wkb"
# Each folder travels with the working tree (tracked and untracked files git does not ignore),
# 64 MiB in all per device call: say so here rather than have the call refused there.
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -n 1 | cut -f 1)
for d in "$DEST"/1 "$DEST"/2 "$DEST"/3; do
    size=$(du -sb "$d" | cut -f 1)
    echo "$d: $((size >> 20)) MiB, with the working tree $(((size + tree) >> 20)) MiB"
    if [ $((size + tree)) -ge $((64 << 20)) ]; then
        echo "dsl_wheels.sh: $d with the working tree is over the device call's 64 MiB; move a wheel" >&2
        exit 1
    fi
done
