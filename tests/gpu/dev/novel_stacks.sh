#!/usr/bin/env bash
# Whether a training step's tensor allocation stacks repeat: ResNet-50
# (caching allocator, stacks all) traced under `cudatrace run`; the tensor
# allocations are cut into steps (allocations per step = those of the last
# step), and for each step it prints how many allocations had a stack no
# earlier step had, with the frames of the first few of those and of the
# earlier stack closest to each.
#
#   tests/gpu/dev/novel_stacks.sh CUDATRACE_BIN
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$1
dir=$(mktemp -d)
RESNET_STEPS=6 CUDATRACE_STACKS=all "$bin" run -o "$dir/t.trace" -- \
    python3 "$here/workloads/resnet_steps.py" "$dir/out.json" plain >/dev/null
"$bin" dump "$dir/t.trace" > "$dir/lines"
python3 - "$dir/lines" <<'PY'
import json, sys
strings, stacks, allocs = {}, {}, []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "string" in r:
        strings[r["string"]["id"]] = r["string"]["text"]
    elif "symbols" in r:
        stacks[r["symbols"]["node"]] = r["symbols"]["frames"]
    elif r.get("op") == "tensor" and r.get("arg1") == 0:
        allocs.append(r["stack"])
def frames(node):
    return [f"{strings.get(f['function'], '?')} [{strings.get(f['module'], '?').rsplit('/', 1)[-1]}]" for f in stacks.get(node, [])]
steps = 11  # 5 warm-up steps and 6 measured
per = len(allocs) // steps
print(f"tensor allocations {len(allocs)}, distinct stacks {len(set(allocs))}, about {per} a step")
seen = set()
shown = 0
for k in range(steps):
    chunk = allocs[k * per:(k + 1) * per]
    novel = [s for s in chunk if s not in seen]
    print(f"step {k}: {len(chunk)} allocations, {len(set(chunk))} stacks, {len(novel)} with a stack not seen before ({len(set(novel))} distinct)")
    if k >= 3:
        for s in list(dict.fromkeys(novel))[:2]:
            if shown >= 4:
                break
            shown += 1
            new = frames(s)
            best = max(seen, key=lambda o: sum(a == b for a, b in zip(frames(o)[::-1], new[::-1])))
            old = frames(best)
            print(f"  novel stack {s} ({len(new)} frames) against {best} ({len(old)} frames):")
            for i in range(max(len(new), len(old))):
                a = new[i] if i < len(new) else ""
                b = old[i] if i < len(old) else ""
                print(f"    {'  ' if a == b else '!='} {a[:90]:<90} | {b[:60]}")
    seen.update(chunk)
PY
rm -rf "$dir"
