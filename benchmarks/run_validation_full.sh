#!/usr/bin/env bash
# Full validation tables (issue 7): every workload, inference at batch 1, inference at the
# published batch, training, at the paper's sizes; then the container case under real
# cgroup CPU quotas. Run on a QUIET machine: nothing else running, same power settings.
#
#   benchmarks/run_validation_full.sh [--smoke] [OUTDIR]
#
#   --smoke   check the pipeline end to end in a few minutes (tiny sizes, 1 round, 2 steps,
#             no search, one workload per family): NOT for figures.
#   OUTDIR    default results/validation-<date>; gets one JSON (every raw timing), one PNG
#             and one text table per part, plus host.txt (the topology the runs saw).
#
# Each part is a separate `tf-autopar validate` call, so a crash or Ctrl-C loses at most
# the part in progress (whose JSON still holds what was measured: written after every row
# and on interrupt). Durations: `tf-autopar validate ... --estimate` prints the process
# count; at paper size expect ~30-60 s per fresh process on a 2-core host, far less on a
# big server per process but a larger search space (see tf_autopar/validation/space.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${HERE}${PYTHONPATH:+:${PYTHONPATH}}"
PY="${PYTHON:-python3}"
TFA=("$PY" -m tf_autopar.cli.main)

SMOKE=0
if [[ "${1:-}" == "--smoke" ]]; then SMOKE=1; shift; fi
OUT="${1:-results/validation-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

if [[ $SMOKE == 1 ]]; then
  COMMON=(--size tiny --rounds 1 --steps 2 --warmup 1 --space none)
  FATHOM=(autoenc)
  PAPER=(ncf)
  QUOTA_SET=(ncf)
  MODES=infer1,train
else
  # 5 interleaved rounds, 20 timed steps after 3 warm-up steps, the host's search space
  COMMON=(--size paper --rounds 5 --steps 20 --warmup 3 --space auto)
  FATHOM=(alexnet autoenc deepq memnet residual seq2seq speech vgg)
  PAPER=(densenet inception_v3 ncf resnet50 squeezenet transformer wide_deep)
  # the container case: wide and sequential models, inference and training
  QUOTA_SET=(inception_v3 resnet50 wide_deep transformer vgg)
  MODES=infer1,infer,train
fi

"${TFA[@]}" inspect --json > "$OUT/host.json" 2>/dev/null || true
{ uname -a; nproc; cat /proc/loadavg; } > "$OUT/host.txt"

part() {  # part NAME ARGS...: one validate call with its JSON, PNG and text table
  local name="$1"; shift
  echo "== $name: tf-autopar validate $*" >&2
  "${TFA[@]}" validate "$@" --json-out "$OUT/$name.json" --plot "$OUT/$name.png" --details \
    | tee "$OUT/$name.txt"
}

# 1. Whole host, no limits: Fathom's eight and the parallelism paper's seven
part fathom "${FATHOM[@]}" --modes "$MODES" "${COMMON[@]}"
part paper  "${PAPER[@]}"  --modes "$MODES" "${COMMON[@]}"

# 2. Container case: the same comparison inside a real cgroup CPU quota (root + writable
#    cpu controller needed; skipped with a message otherwise). TensorFlow's default sizes
#    its pools for the whole host and is throttled (cpu.stat nr_throttled is reported).
if [[ $(id -u) == 0 ]]; then
  NCPU=$(nproc)
  QUOTAS=(1)
  if (( NCPU >= 8 )); then QUOTAS+=($((NCPU / 4))); fi
  for q in "${QUOTAS[@]}"; do
    part "quota$q" "${QUOTA_SET[@]}" --modes "$MODES" "${COMMON[@]}" --cpu-quota "$q"
  done
else
  echo "skipping the CPU-quota tables: not root (cgroup groups cannot be created)" >&2
fi

echo "results in $OUT" >&2
