#!/usr/bin/env bash
# The work of a lent NVIDIA machine, by stage; each stage installs what it needs first (cffi from
# the carried wheels, the project in editable mode) and ends with a short summary, the logs in
# $OUT. A device call runs at most 10 minutes: give it the stages that fit.
#   device run: carry [".whl"], command: bash benchmarks/gpu_session.sh STAGE [STAGE ...]
# Stages:
#   suite    every kernel family compiled, then the whole test suite with the cuda device
#            (python3 -m pytest -n 16 tests; ~5 min on an H100/H200 with the compile)
#   train    examples/train_gpt.py on cuda, f32 and bf16 (seconds each)
#   decode   Llama decode against transformers (bench_decode.py, the 1.1B and 12-layer shapes at
#            batch 1, bf16 and int8 weights), profile_decode.py's replayed 1.1B step as the backend runs it (its
#            --set compares other choices: ops.matmul.GEMV_MAX_ROWS=4, launch.SPREAD_ROWS_BELOW=0),
#            and probe_decode_products.py (that step's products one by one, BLAS and GEMV vs torch)
#   decode12 bench_decode.py at 12 layers of d768, batch 1 and 8
#   int8     weight-only int8 decode against bf16 at the 1.1B shape (issue 46), in one call:
#            probe_int8_products.py (each product's int8 GEMV against gemv1 and cuBLAS, us and
#            GB/s), bench_decode.py --int8 (tokens/s of both, batch 1) and profile_decode.py --int8
#   ab       the replayed decode step (profile_decode.py, 1.1B and 12 layers) of an older tree
#            against this one, alternated in one process each, on the same card: the older
#            tree is a folder of the working tree that carries it (the device copy has no .git),
#            e.g. `git archive REV | tar -x -C diag/base` (diag/ is ignored: carry it) and
#            BASE=diag/base bash benchmarks/gpu_session.sh ab
#   core     bench_gpu.py --cases dispatch,core: dispatch, bandwidth, GEMMs, a decode step's linear layers (GEMV)
#   bench    bench_gpu.py --cases all: kernels, GEMMs, attention, conv, the GPT step against torch
#            eager and torch.compile (both modes)
#   multi    two or four GPUs (nvidia-h200-x2, -x4): tests/test_distributed.py, whose 2- and 4-rank
#            cuda tests include train_gpt on the GPUs against one (loss curve and parameters),
#            then bench_ddp.py on 1 rank and on every GPU, bf16
set -uo pipefail
OUT=${OUT:-/tmp/tl_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TENSORLITE_CACHE_DIR=${TENSORLITE_CACHE_DIR:-/tmp/tl_cache}
# Open MPI (the machines' mpi4py) refuses root without these; NVLink multicast stays off (KINDS.md)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
SUMMARY="$OUT/summary.txt"; : > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
timed() {  # timed NAME LIMIT_S CMD...: run CMD under a time limit into $OUT/NAME.log, note rc and wall time
    local name=$1 limit=$2; shift 2
    local start; start=$(date +%s)
    timeout -k 20 "$limit" "$@" > "$OUT/$name.log" 2>&1
    note "$name: rc=$? wall $(( $(date +%s) - start )) s"
}

for stage in "$@"; do
    case $stage in
    suite)
        timed warmup 300 python3 -c "import tensorlite as tl; tl.backend.get_device('cuda').warmup()"
        timed pytest 480 python3 -m pytest -p no:cacheprovider -o addopts= -q -n 16 -rfE tests
        grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -40 | tee -a "$SUMMARY"
        tail -1 "$OUT/pytest.log" | tee -a "$SUMMARY" ;;
    train)
        for dt in f32 bf16; do
            timed "train_$dt" 150 python3 examples/train_gpt.py --device cuda --dtype "$dt" --out ""
            tail -2 "$OUT/train_$dt.log" | tee -a "$SUMMARY"
        done ;;
    decode)
        timed decode 300 python3 benchmarks/bench_decode.py --shapes 1.1b,12l --batches 1 --reps 3 --int8
        timed profile_now 150 python3 benchmarks/profile_decode.py --shape 1.1b --top 30
        timed products 150 python3 benchmarks/probe_decode_products.py
        sed -n '/^| /,$p' "$OUT/decode.log" | tee -a "$SUMMARY"
        note "-- profile_now"; sed -n '/^decode step/,$p' "$OUT/profile_now.log" | head -45 | tee -a "$SUMMARY"
        note "-- products"; tail -6 "$OUT/products.log" | tee -a "$SUMMARY" ;;
    ab)
        base=${BASE:?ab: set BASE to the folder of the older tree}
        python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/tl_base "$base" >/dev/null 2>&1 \
            || { note "ab: installing $base failed"; exit 1; }
        for shape in 1.1b 12l; do
            for run in 1 2; do
                for tree in base this; do
                    if [ "$tree" = base ]; then  # the older tree's package first on the path, its own script
                        PYTHONPATH=/tmp/tl_base:$PYTHONPATH timeout 200 python3 "$base/benchmarks/profile_decode.py" \
                            --shape "$shape" --top 1 > "$OUT/ab_${shape}_${tree}_$run.log" 2>&1
                    else
                        timeout 200 python3 benchmarks/profile_decode.py --shape "$shape" --top 1 \
                            > "$OUT/ab_${shape}_${tree}_$run.log" 2>&1
                    fi
                    note "ab $shape $tree run $run: $(grep -m1 'replayed graph' "$OUT/ab_${shape}_${tree}_$run.log")"
                done
            done
        done ;;
    int8)
        timed int8_products 150 python3 benchmarks/probe_int8_products.py
        timed int8_decode 270 python3 benchmarks/bench_decode.py --shapes 1.1b --batches 1 --reps 3 --int8
        timed int8_profile 120 python3 benchmarks/profile_decode.py --shape 1.1b --int8 --top 20
        note "-- int8 products"; sed -n '/^copy bandwidth/,$p' "$OUT/int8_products.log" | tee -a "$SUMMARY"
        note "-- int8 decode"; sed -n '/^| /,$p' "$OUT/int8_decode.log" | tee -a "$SUMMARY"
        note "-- int8 profile"; sed -n '/^decode step/,$p' "$OUT/int8_profile.log" | head -30 | tee -a "$SUMMARY" ;;
    decode12)
        timed decode_12l 400 python3 benchmarks/bench_decode.py --shapes 12l --batches 1,8 --reps 2
        sed -n '/^| /,$p' "$OUT/decode_12l.log" | tee -a "$SUMMARY" ;;
    core)
        timed core 200 python3 benchmarks/bench_gpu.py --device cuda --cases dispatch,core
        sed -n '/^| case |/,$p' "$OUT/core.log" | tee -a "$SUMMARY" ;;
    bench)
        timed bench 420 python3 benchmarks/bench_gpu.py --device cuda --cases all --json "$OUT/bench.json"
        sed -n '/^| case |/,$p' "$OUT/bench.log" | tee -a "$SUMMARY" ;;
    multi)
        gpus=$(nvidia-smi -L | wc -l)
        timed distributed 300 python3 -m pytest -p no:cacheprovider -o addopts= -q -rfE tests/test_distributed.py
        grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/distributed.log" | tail -12 | tee -a "$SUMMARY"
        timed ddp_one 150 python3 benchmarks/bench_ddp.py --dtype bf16 --json "$OUT/one.json"
        timed ddp_all 200 mpiexec -n "$gpus" --bind-to none python3 benchmarks/bench_ddp.py --dtype bf16 \
            --baseline "$OUT/one.json"
        for f in ddp_one ddp_all; do sed -n '/^ranks  framework/,$p' "$OUT/$f.log" | tee -a "$SUMMARY"; done ;;
    *)
        note "unknown stage $stage (suite, train, decode, int8, decode12, ab, core, bench, multi)"; exit 2 ;;
    esac
done
