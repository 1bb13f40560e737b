#!/usr/bin/env bash
# A/B/C of the step cost on one machine, interleaved: each folder under
# target/gpu-ab/ (a libcudatrace.so; the CLI is this tree's) is a variant.
#   bash tests/gpu/dev/ab_step_cost.sh CONFIG ROUNDS
# Each round runs one process of CONFIG per variant, in a rotating order;
# the tables of each variant and every process's blocks (ab.json) go to $OUT.
set -u
config=$1
rounds=$2
root=$(pwd)
variants=$(ls target/gpu-ab)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in $variants; do
  rm -rf /tmp/ab-$v && mkdir -p /tmp/ab-$v/target/release
  cp -r tests /tmp/ab-$v/tests
  cp target/gpu-carry/cudatrace target/gpu-carry/libcudatrace-unrecorded.so /tmp/ab-$v/target/release/
  cp target/gpu-ab/$v/* /tmp/ab-$v/target/release/
done
set -- $variants
for r in $(seq 1 "$rounds"); do
  for v in "$@"; do
    timeout 200 python3 /tmp/ab-$v/tests/gpu/step_cost.py run "$config" --processes 1 \
      --results "/tmp/ab-results/$v/$r" >/dev/null 2>&1
    echo "round $r $v: $?"
  done
  set -- "${@:2}" "$1"
done
for v in $variants; do
  echo "== $v"
  python3 tests/gpu/step_cost.py table /tmp/ab-results/$v/* 2>&1 | grep -v "not measured" | grep "^|\|paused"
done
python3 - <<'PY' > "$OUT/ab.json"
import glob, json
print(json.dumps({p: json.load(open(p)) for p in sorted(glob.glob("/tmp/ab-results/*/*/*.json"))}))
PY
