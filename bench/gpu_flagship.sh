#!/usr/bin/env bash
# One GPU lease, one call: training throughput (bench/train_throughput.py, eager vs compiled, ours vs a compiled
# stock nn.Transformer, MFU), then the flagship run (configs/flagship.yaml), whose exported model and logs land in
# $OUT. Needs: a GPU with PyTorch; the prepared everyday store in data/prepared/everyday/ or as an archive
# (FLAGSHIP_STORE, made by: tar -C data/prepared -cJf STORE.tar.xz everyday); wheels in .whl/ if pypinyin is missing.
#
#   OUT=/tmp/out bash bench/gpu_flagship.sh                   # on the GPU machine (RUN_CUDA_TESTS=0: no tests first)
#   OUT=/tmp/out BENCH_PRECISION=fp32 FLAGSHIP_SECONDS=30 \
#     BENCH_ARGS="--rounds 1 --steps 2 model.d_model=64 model.n_heads=2" \
#     FLAGSHIP_ARGS="model.d_model=64 model.n_heads=2 train.batch_tokens=2048" bash bench/gpu_flagship.sh  # CPU check
#
# The benchmark runs eager, then compiled (which crashed on an H200 with torch 2.11, with dynamic shapes:
# docs/benchmarks.md) with lengths in buckets of LENGTH_BUCKET (default 16: static shapes, a compilation a
# bucket, two for max_len 32, for ours and for the stock model; 8 pads less but compiles twice as many graphs,
# each of them tens of seconds; 0: dynamic shapes, one compilation, as on that lease), and the flagship compiled
# the same way. The flagship trains compiled where the compiled benchmark ran, else eager; its steps come from the
# throughput just measured (at base's batch, which trains no faster a token than the flagship's 4x larger batch),
# so that its schedule ends when the time is up; train.max_minutes stops it in any case. If compiled training
# fails before its first checkpoint, the run is repeated eager in the time left. The exported model (float16, no
# optimizer state) is cut into 15 MiB pieces:
#   cat OUT/flagship.pt.part-* > flagship.pt
set -u
OUT=${OUT:?set OUT to the folder the results go to}
FLAGSHIP_SECONDS=${FLAGSHIP_SECONDS:-240}  # training time, compilation and the final evaluation aside
TOTAL_SECONDS=${TOTAL_SECONDS:-540}  # the whole script: everything is cut to end by then
BENCH_SECONDS=${BENCH_SECONDS:-200}
BENCH_ARGS=${BENCH_ARGS:---rounds 3 --steps 20}
LENGTH_BUCKET=${LENGTH_BUCKET:-16}  # compiled runs only (train.length_bucket)
FLAGSHIP_ARGS=${FLAGSHIP_ARGS:-}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" /tmp/flagship
started=$(date +%s)
deadline=$(( started + TOTAL_SECONDS ))
say() { echo "[$(( $(date +%s) - started ))s] $*" | tee -a "$OUT/summary.txt"; }

if ! python3 -c "import pypinyin" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -n "${FLAGSHIP_STORE:-}" ] && [ ! -d data/prepared/everyday ]; then
    mkdir -p data/prepared && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
        "$FLAGSHIP_STORE" data/prepared || say "could not unpack $FLAGSHIP_STORE"
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"; nproc; } \
    | tee -a "$OUT/summary.txt"

if [ "${RUN_CUDA_TESTS:-1}" = 1 ]; then  # the CUDA path's tests (tests/test_cuda.py), a minute or two
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py > /tmp/flagship/cuda_tests.log 2>&1
    say "CUDA tests exit $?: $(tail -n 1 /tmp/flagship/cuda_tests.log)"
fi

bucket_of() { [ "$1" = off ] && echo 0 || echo "$LENGTH_BUCKET"; }  # $1: train.compile
bench() {  # $1: --compile setting, $2: seconds, $3: log. Ours vs stock nn.Transformer on base.yaml, bf16.
    say "throughput: base.yaml, compile $1, length buckets of $(bucket_of "$1")"
    # shellcheck disable=SC2086  # BENCH_ARGS holds several arguments
    timeout "$2" python3 bench/train_throughput.py --config configs/base.yaml --compile "$1" $BENCH_ARGS \
        train.precision="${BENCH_PRECISION:-bf16}" train.length_bucket="$(bucket_of "$1")" > "/tmp/flagship/$3" 2>&1
    say "throughput exit $?: $(tail -n 1 "/tmp/flagship/$3" | cut -c1-2000)"
}
rate_of() {  # the tokens/s of ours in a benchmark's JSON line ($1: log, $2: key), 0 without one
    tail -n 1 "/tmp/flagship/$1" | python3 -c "
import json, sys
try:
    print(json.loads(sys.stdin.read())[sys.argv[1]])
except (ValueError, KeyError):
    print(0)" "$2"
}
bench off $(( BENCH_SECONDS / 3 )) throughput_eager.log
bench on $(( BENCH_SECONDS * 2 / 3 )) throughput.log
rate=$(rate_of throughput.log ours_compiled_tokens_per_s)
if [ "$rate" = 0 ]; then  # the pair crashed: ours compiled alone (the stock model's masked attention may be why)
    BENCH_ARGS="--reference-precision none $BENCH_ARGS" bench on $(( BENCH_SECONDS / 2 )) throughput_ours.log
    rate=$(rate_of throughput_ours.log ours_compiled_tokens_per_s)
fi
compile=on  # compiled training where the compiled benchmark ran; eager where it failed
if [ "$rate" = 0 ]; then
    compile=off
    rate=$(rate_of throughput_eager.log ours_tokens_per_s)
fi

batch_tokens=$(python3 -c "
import sys; sys.path.insert(0, '.')
from pinyin_hanzi.config import load_config
print(load_config('configs/flagship.yaml', sys.argv[1:]).train.batch_tokens)" $FLAGSHIP_ARGS)
steps=$(( rate > 0 ? rate * FLAGSHIP_SECONDS / batch_tokens : 1500 ))
steps=$(( steps < 50 ? 50 : steps ))
train() {  # $1: train.compile. Bounded by the deadline, less the time the export and the archive take.
    local left=$(( deadline - $(date +%s) - 30 ))
    # train.max_minutes counts from the first step: setup (~20 s) and the closing evaluation (~30 s) come on top
    local minutes
    minutes=$(python3 -c "print(round(max(min($FLAGSHIP_SECONDS + 90, $left - 60), 10) / 60, 2))")
    say "flagship: $steps steps of $batch_tokens tokens (measured $rate tok/s), compile=$1, max_minutes=$minutes"
    # shellcheck disable=SC2086
    timeout "$left" python3 train.py --config configs/flagship.yaml --overwrite train.max_steps="$steps" \
        train.max_minutes="$minutes" train.compile="$1" train.length_bucket="$(bucket_of "$1")" \
        train.checkpoint_dir=/tmp/flagship/checkpoints \
        train.runs_dir=/tmp/flagship/runs $FLAGSHIP_ARGS >> /tmp/flagship/train.log 2>&1
    local status=$?
    say "flagship exit $status: $(grep -E 'step [0-9]+: valid|best valid|error' /tmp/flagship/train.log | tail -n 3)"
}
train "$compile"
if [ ! -f /tmp/flagship/checkpoints/flagship/last.pt ] && [ "$compile" = on ] && (( deadline - $(date +%s) > 120 )); then
    train off
fi

kept=/tmp/flagship/checkpoints/flagship/best.pt
[ -f "$kept" ] || kept=/tmp/flagship/checkpoints/flagship/last.pt
if [ -f "$kept" ]; then
    python3 -m pinyin_hanzi.cli.export "$kept" /tmp/flagship/flagship.pt 2>&1 | tee -a "$OUT/summary.txt"
    split -b 15M -d /tmp/flagship/flagship.pt "$OUT/flagship.pt.part-"
    sha256sum /tmp/flagship/flagship.pt | tee -a "$OUT/summary.txt"
fi
tar -C /tmp/flagship -czf "$OUT/logs.tar.gz" cuda_tests.log throughput_eager.log throughput.log throughput_ours.log train.log runs 2>/dev/null
say "done"
