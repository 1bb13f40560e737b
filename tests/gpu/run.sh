#!/usr/bin/env bash
# GPU scenario suite: runs real CUDA workloads under libcudatrace.so and
# prints a pass/fail table. Builds nothing of ours: run `cargo build --release`
# first (on any machine; the binaries are carried to the GPU machine). The one
# CUDA test program is compiled here with nvcc because its static runtime is
# the point of the scenario.
#
#   tests/gpu/run.sh [--only NAME[,NAME...]]
#
# The ResNet cost scenarios (R1-R3, T2) take ten rounds of some 60 s each,
# longer than one call on the GPU machine may last: with
# RESNET_COST_STATE=FILE RESNET_COST_ROUNDS=5 each call runs five rounds and
# keeps every process's figure in FILE, and the call that completes the ten
# gives the verdict. Rounds count only on the GPU they ran on: a call that
# finds itself on another machine starts the ten again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || true
exec python3 "$here/run_scenarios.py" \
    --preload "$root/target/release/libcudatrace.so" \
    --cli "$root/target/release/cudatrace" "$@"
