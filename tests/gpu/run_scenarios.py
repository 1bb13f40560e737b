"""Runs each GPU scenario under the tracer, checks the trace against what the
workload itself reports, and prints a table. Exit status 1 if any fails."""
import argparse
import collections
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import hook_cost_table

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
DEVICE_KINDS = {"device", "managed", "pitch", "pool", "vmm-physical", "array"}


class Run:
    def __init__(self, returncode, stdout, stderr, seconds, processes, events, data):
        self.returncode, self.stdout, self.stderr, self.seconds = returncode, stdout, stderr, seconds
        self.processes, self.events, self.data = processes, events, data

    def ops(self, op, api_prefix=None, kind=None):
        return [
            e for e in self.events
            if e["op"] == op and (api_prefix is None or e["api"].startswith(api_prefix)) and (kind is None or e["kind"] == kind)
        ]


def run(args, name, argv, env=None, traced=True):
    workdir = tempfile.mkdtemp(prefix=f"cudatrace-{name}-")
    spool = os.path.join(workdir, "spool")
    os.mkdir(spool)
    out_json = os.path.join(workdir, "out.json")
    environment = dict(os.environ, **(env or {}))
    if traced:
        environment["LD_PRELOAD"] = args.preload
        environment["CUDATRACE_DIR"] = spool
    argv = [a.replace("{out}", out_json) for a in argv]
    start = time.perf_counter()
    done = subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=args.timeout)
    seconds = time.perf_counter() - start
    processes, events = [], []
    if traced:
        dump = subprocess.run([args.cli, "dump", "--dir", spool], capture_output=True, text=True, check=True)
        for line in dump.stdout.splitlines():
            record = json.loads(line)
            if "process" in record:
                processes.append(record["process"])
            elif "op" in record and record["op"] not in ("stack-node", "blob"):
                # Stack nodes and blob pieces have fields of their own, not
                # an event's kind, device, address and size.
                events.append(record)
    data = json.load(open(out_json)) if os.path.exists(out_json) else None
    shutil.rmtree(workdir, ignore_errors=True)
    return Run(done.returncode, done.stdout, done.stderr, seconds, processes, events, data)


class CliRun:
    def __init__(self, returncode, stderr, report, data, trace_bytes, stdout=""):
        self.returncode, self.stderr, self.report, self.data, self.trace_bytes = returncode, stderr, report, data, trace_bytes
        self.stdout = stdout

    def process(self, pid):
        return next((p for p in self.report["processes"] if p["pid"] == pid), None)


def report_of(args, trace):
    done = subprocess.run([args.cli, "report", "--json", trace], capture_output=True, text=True)
    return json.loads(done.stdout) if done.stdout else None


def run_cli(args, name, argv, env=None, plain_preload=False, options=()):
    """Runs argv under `cudatrace run OPTIONS` (or plain LD_PRELOAD) and reads the report."""
    workdir = tempfile.mkdtemp(prefix=f"cudatrace-{name}-")
    trace = os.path.join(workdir, "run.trace")
    out_json = os.path.join(workdir, "out.json")
    argv = [a.replace("{out}", out_json) for a in argv]
    environment = dict(os.environ, **(env or {}))
    if plain_preload:
        environment.update(LD_PRELOAD=args.preload, CUDATRACE_OUT=trace)
        environment.pop("CUDATRACE_DIR", None)
        done = subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=args.timeout)
        deadline = time.time() + 60
        report = None
        while time.time() < deadline:
            report = report_of(args, trace) if os.path.exists(trace) else None
            if report and report["complete"]:
                break
            time.sleep(0.2)
    else:
        command = [args.cli, "run", "--force", "--preload", args.preload, "-o", trace, *options, "--"] + argv
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=args.timeout)
        report = report_of(args, trace) if os.path.exists(trace) else None
    data = json.load(open(out_json)) if os.path.exists(out_json) else None
    size = os.path.getsize(trace) if os.path.exists(trace) else 0
    keep = os.environ.get("CUDATRACE_KEEP_TRACES")
    if keep and os.path.exists(trace):
        os.makedirs(keep, exist_ok=True)
        shutil.copy(trace, os.path.join(keep, f"{name}.trace"))
    shutil.rmtree(workdir, ignore_errors=True)
    return CliRun(done.returncode, done.stderr, report, data, size, done.stdout)


def exited_cleanly(r):
    if r.returncode != 0:
        return False, f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}"
    return True, ""


def keyed(events):
    return collections.Counter((e["address"], e["size"]) for e in events)


def scenario_torch_caching(args):
    r = run(args, "torch", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), "{out}", "history"])
    ok, why = exited_cleanly(r)
    if not ok:
        return False, why
    segments = r.data["segments"]
    theirs_alloc = keyed(e | {"address": e["addr"]} for e in segments if e["action"] == "segment_alloc")
    theirs_free = keyed(e | {"address": e["addr"]} for e in segments if e["action"] == "segment_free")
    device0 = [e for e in r.events if e["kind"] in DEVICE_KINDS and e["device"] == 0]
    ours_alloc = keyed(e for e in device0 if e["op"] == "alloc")
    ours_free = keyed(e for e in device0 if e["op"] == "free")
    missing_alloc = sum((theirs_alloc - ours_alloc).values())
    missing_free = sum((theirs_free - ours_free).values())
    doubled = sum(min(ours_alloc[k], 99) - theirs_alloc[k] for k in theirs_alloc if ours_alloc[k] > theirs_alloc[k])
    extra = [e for e in device0 if e["op"] == "alloc" and (e["address"], e["size"]) not in theirs_alloc]
    extra_by_api = collections.Counter(e["api"] for e in extra)
    extra_caching = extra_by_api.get("cudaMalloc", 0)
    passed = missing_alloc == 0 and missing_free == 0 and doubled == 0 and extra_caching == 0 and sum(theirs_alloc.values()) > 0
    return passed, (
        f"segment_alloc {sum(theirs_alloc.values())} / matched {sum(theirs_alloc.values()) - missing_alloc}; "
        f"segment_free {sum(theirs_free.values())} / matched {sum(theirs_free.values()) - missing_free}; "
        f"doubled {doubled}; extra allocations outside the caching allocator: {dict(extra_by_api) or 'none'} "
        f"(sizes {sorted(e['size'] for e in extra)})"
    )


def scenario_torch_overhead(args):
    plain = run(args, "plain", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), "{out}"], traced=False)
    traced = run(args, "traced", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), "{out}"])
    for r in (plain, traced):
        ok, why = exited_cleanly(r)
        if not ok:
            return False, why
    a, b = plain.data["step_ms_median"], traced.data["step_ms_median"]
    return True, f"median step {a:.2f} ms untraced, {b:.2f} ms traced ({(b - a) / a * 100:+.1f}%); {len(traced.events)} events"


def scenario_torch_expandable(args):
    r = run(args, "expandable", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), "{out}", "history"],
            env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    ok, why = exited_cleanly(r)
    if not ok:
        return False, why
    creates, releases = r.ops("alloc", "cuMemCreate"), r.ops("free", "cuMemRelease")
    maps, unmaps = r.ops("map"), r.ops("unmap")
    live = {e["address"]: e["size"] for e in creates if e["device"] == 0}
    for e in releases:
        live.pop(e["address"], None)
    physical = sum(live.values())
    reserved = r.data["reserved"]
    theirs_mapped = sum(e["size"] for e in r.data["segments"] if e["action"] == "segment_map")
    ours_mapped = sum(e["size"] for e in maps)
    passed = len(creates) > 0 and len(maps) > 0 and physical == reserved
    return passed, (
        f"cuMemCreate {len(creates)}, cuMemRelease {len(releases)}, cuMemMap {len(maps)}, cuMemUnmap {len(unmaps)}; "
        f"live physical {physical} B vs torch reserved {reserved} B; mapped bytes ours {ours_mapped} / torch segment_map {theirs_mapped}"
    )


def scenario_torch_async(args):
    r = run(args, "async", [sys.executable, os.path.join(WORKLOADS, "torch_async.py"), "{out}"],
            env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    ok, why = exited_cleanly(r)
    if not ok:
        return False, why
    allocs, frees = keyed(r.ops("alloc", "cudaMallocAsync", "pool")), r.ops("free", kind="pool")
    freed = collections.Counter(e["address"] for e in frees)
    blocks = r.data["blocks"]
    found = sum(1 for b in blocks if allocs[(b["addr"], b["size"])] == 1)
    released = sum(1 for b in blocks if freed[b["addr"]] >= 1)
    apis = sorted({e["api"] for e in frees})
    return found == len(blocks) and released == len(blocks), (
        f"{found}/{len(blocks)} tensors found as cudaMallocAsync pool allocations, {released}/{len(blocks)} freed (by {apis})"
    )


def scenario_static_runtime(args):
    build = tempfile.mkdtemp(prefix="cudatrace-nvcc-")
    binary = os.path.join(build, "static_runtime")
    compiled = subprocess.run(["nvcc", "-o", binary, os.path.join(WORKLOADS, "static_runtime.cu")], capture_output=True, text=True)
    if compiled.returncode != 0:
        return False, "nvcc failed: " + compiled.stderr.strip()[-200:]
    linked = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    r = run(args, "static", [binary])
    ok, why = exited_cleanly(r)
    if not ok:
        return False, why
    lines = [l.split() for l in r.stdout.splitlines()]
    expected_allocs = [(int(l[1], 16), int(l[2])) for l in lines if l[0] == "alloc"]
    expected_frees = [int(l[1], 16) for l in lines if l[0] == "free"]
    async_block = [(int(l[1], 16), int(l[2])) for l in lines if l[0] == "async"][0]
    allocs = keyed(r.ops("alloc", "cuMemAlloc_v2", "device"))
    pool_allocs = keyed(r.ops("alloc", "cuMemAllocAsync", "pool"))
    frees = collections.Counter(e["address"] for e in r.ops("free", "cuMemFree_v2"))
    tagged = [e for e in r.events if e["api"].startswith("cuda")]
    passed = (
        all(allocs[k] == 1 for k in expected_allocs)
        and all(frees[a] == 1 for a in expected_frees)
        and pool_allocs[async_block] == 1
        and not tagged
        and "libcudart" not in linked
    )
    return passed, (
        f"{sum(allocs[k] for k in expected_allocs)}/3 cudaMalloc seen as cuMemAlloc_v2, {sum(frees[a] for a in expected_frees)}/2 frees, "
        f"cudaMallocAsync seen: {pool_allocs[async_block] == 1}; libcudart linked dynamically: {'libcudart' in linked}"
    )


def scenario_raw_driver(args):
    r = run(args, "raw", [sys.executable, os.path.join(WORKLOADS, "raw_driver.py"), "{out}"])
    ok, why = exited_cleanly(r)
    if not ok:
        return False, why
    allocs = r.ops("alloc")
    by_key = {(e["address"], e["size"]): e["api"] for e in allocs}
    raw = r.data["ctypes"]
    raw_api = by_key.get((raw["addr"], raw["size"]))
    cupy = r.data.get("cupy")
    cupy_api = by_key.get((cupy["addr"], cupy["size"])) if cupy else None
    passed = raw_api == "cuMemAlloc_v2" and cupy_api is not None and r.data["torch_allocated_unchanged"]
    return passed, (
        f"ctypes cuMemAlloc_v2 64 MiB seen as {raw_api}; CuPy 32 MiB seen as {cupy_api or r.data.get('cupy_error')}; "
        f"torch.cuda.memory_allocated unchanged: {r.data['torch_allocated_unchanged']}"
    )


def scenario_oom(args):
    r = run(args, "oom", [sys.executable, os.path.join(WORKLOADS, "oom.py"), "{out}"])
    ok, why = exited_cleanly(r)
    if not ok:
        return False, why
    ooms = r.ops("oom")
    exact = [e for e in ooms if e["size"] == r.data["request"] and e["arg2"] == r.data["total"] and e["device"] == 0]
    desc = [f"{e['api']} {e['size']} B (free {e['arg1']}, total {e['arg2']})" for e in ooms]
    return r.data["raised"] and len(exact) >= 1, f"torch raised: {r.data['raised']}; oom events: {desc}"


def scenario_no_cuda(args):
    r = run(args, "nocuda", [sys.executable, "-c", "import json; print(json.dumps([1]))"])
    return r.returncode == 0 and not r.processes, f"spool files: {len(r.processes)}"


def live_keys(process, device=0):
    for d in process["devices"]:
        if d["device"] == device:
            return {(l["address"], l["size"]): l["api"] for l in d["live_at_exit"]}
    return {}


def scenario_two_processes(args):
    r = run_cli(args, "two", [sys.executable, os.path.join(WORKLOADS, "two_processes.py"), "{out}"])
    if r.returncode != 0 or not r.report:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    found = []
    for worker in r.data["workers"]:
        p = r.process(worker["pid"])
        api = live_keys(p).get((worker["addr"], worker["size"])) if p else None
        found.append(p is not None and p["exit_status"] == 0 and api == "cuMemAlloc_v2")
    with_cuda = [p for p in r.report["processes"] if p["devices"]]
    return all(found) and r.report["complete"], (
        f"{len(r.report['processes'])} processes in the trace, {len(with_cuda)} using the GPU; "
        f"each worker's raw 48+rank MiB allocation live at exit with exit status 0: {found}"
    )


def scenario_unrecorded(args):
    """A child that lost CUDATRACE_DIR uses the GPU: the trace names it, and why, in the same words as before
    the notice line carried a code (the collector words it now)."""
    child = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
    r = run_cli(args, "unrecorded", ["sh", "-c", f'env -u CUDATRACE_DIR {sys.executable} -c "{child}"'])
    if not r.report:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    wanted = "its environment lost CUDATRACE_DIR, which names the spool folder"
    reasons = [p["reason"] for p in r.report["unrecorded_processes"]]
    said = wanted in r.stderr
    return r.returncode == 0 and reasons == [wanted] and said, (
        f"exit {r.returncode}; unrecorded processes' reasons {reasons}; said on stderr: {said}"
    )


def scenario_pause_resume(args):
    """Plain LD_PRELOAD started paused, resumed and paused again by
    `cudatrace resume` and `pause` from inside the job: every segment is in
    the trace, and only the one made while recording carries its stack."""
    paused_site = "(recorded while paused: no call stack)"
    r = run_cli(args, "pause", [sys.executable, os.path.join(WORKLOADS, "pause_resume.py"), "{out}", args.cli],
                env={"CUDATRACE_START_PAUSED": "1"}, plain_preload=True)
    if r.returncode != 0 or not r.report or not r.data:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    spans = r.report["recording_paused"]
    live = [l for p in r.report["processes"] for d in p["devices"] for l in d["live_at_exit"]]
    by_address = {l["address"]: l for l in live}
    found = [by_address.get(a) for a in r.data["addresses"]]
    heads = [l["stack"][0]["function"] if l and l["stack"] else None for l in found]
    files = [{f.get("file") or "" for f in l["stack"]} if l else set() for l in found]
    passed = (
        len(spans) == 2 and spans[0]["end_s"] is not None and spans[1]["end_s"] is None
        and [l and l["size"] for l in found] == [64 << 20, 32 << 20, 16 << 20]
        and heads[0] == heads[2] == paused_site
        and any(f.endswith("pause_resume.py") for f in files[1]) and r.report["complete"]
    )
    return passed, (
        f"paused spans {[(s['start_s'], s['end_s']) for s in spans]}; the three segments' sizes "
        f"{[l and l['size'] for l in found]}, first frames {heads}; the resumed one from pause_resume.py: "
        f"{any(f.endswith('pause_resume.py') for f in files[1])}"
    )


def steps_and_leaks(args, kind, steps):
    """Runs steps_and_leaks.py KIND under `cudatrace run`; (run, the main process)."""
    r = run_cli(args, f"steps-{kind}", [sys.executable, os.path.join(WORKLOADS, "steps_and_leaks.py"), kind, str(steps), "{out}"])
    main = None
    if r.report:
        main = next((p for p in r.report["processes"] if p["tensors"]["actions"] > 0), None)
    return r, main


def growing_at(site, path, line):
    """Whether a growing entry's stack holds PATH:LINE."""
    return any((f.get("file") or "").endswith(path) and f.get("line") == line for f in site["stack"])


def scenario_steps_and_growth(args):
    """Steps found with no code change, and leaks found by their growth:
    ResNet-50 and GPT-2 loops give their step counts (within 1) and nothing
    growing; seed 000's example gives its 5 iterations and nothing growing
    (its gradients rise once); four leaks that Python's shutdown frees each
    give one growing call site, the line that made what leaked, at the rate
    it leaked (within 5%) where that is known."""
    passed, details = True, []
    workload = "steps_and_leaks.py"
    for kind, steps in (("resnet", 30), ("gpt2", 15)):
        r, main = steps_and_leaks(args, kind, steps)
        if r.returncode != 0 or main is None or not r.data:
            passed = False
            details.append(f"{kind}: exit {r.returncode}: {r.stderr.strip()[-200:]}")
            continue
        found = (main["steps"] or {}).get("count", 0)
        peak = max((d["allocated_peak_bytes"] for d in main["tensors"]["devices"]), default=0)
        ok = abs(found - steps) <= 1 and main["growing"] == [] and peak == r.data["requested_peak"]
        passed &= ok
        details.append(f"{kind}: {found} steps of {steps}, growing {len(main['growing'] or [])}, "
                       f"allocated peak {peak} vs PyTorch's requested peak {r.data['requested_peak']}"
                       f"{'' if ok else ' FAILED'}")
    # Seed 000: leak_zero_grad.py, 5 steps.
    seed = run_cli(args, "steps-seed000", [sys.executable, os.path.join(EXAMPLES, "leak_zero_grad.py")])
    main = next((p for p in (seed.report or {"processes": []})["processes"] if p["tensors"]["actions"] > 0), None)
    if main is None:
        passed = False
        details.append(f"seed 000: exit {seed.returncode}: {seed.stderr.strip()[-200:]}")
    else:
        found = (main["steps"] or {}).get("count", 0)
        ok = found == 5 and main["growing"] == []
        passed &= ok
        details.append(f"seed 000: {found} steps of 5, growing {len(main['growing'] or [])}{'' if ok else ' FAILED'}")
    for kind in ("append", "hook_dict", "validation", "cache"):
        r, main = steps_and_leaks(args, kind, 8)
        if r.returncode != 0 or main is None or not r.data:
            passed = False
            details.append(f"{kind}: exit {r.returncode}: {r.stderr.strip()[-200:]}")
            continue
        growing = main["growing"] or []
        line = r.data["leak_line"]
        at_line = [g for g in growing if growing_at(g, workload, line)]
        # Other lines that must grow too (validation's batch, kept by the graph).
        also = [l for l in r.data["also_growing_lines"] if any(growing_at(g, workload, l) for g in growing)]
        rate = at_line[0]["bytes_per_step"] if at_line else 0
        expected = r.data["leak_bytes_per_step"]
        rate_ok = bool(at_line) and abs(rate - expected) <= 0.05 * expected
        found = (main["steps"] or {}).get("count", 0)
        sites_ok = len(growing) == 1 + len(r.data["also_growing_lines"]) and len(also) == len(r.data["also_growing_lines"])
        ok = sites_ok and len(at_line) == 1 and rate_ok and abs(found - 8) <= 1
        passed &= ok
        details.append(f"{kind}: {found} steps; growing {[(g['call_site'], g['bytes_per_step']) for g in growing]}; "
                       f"line {line} named {len(at_line) == 1}; rate {rate} vs {expected}{'' if ok else ' FAILED'}")
    return passed, " || ".join(details)


def scenario_long_run_folded(args):
    """A long ResNet-50 run under a 64 MiB cap (CUDATRACE_MAX_SIZE): the trace
    stays within it, folded; the allocated peak is PyTorch's; the steps found
    are the loop's (within 1) and nothing grows. Then the append leak under
    an 8 MiB cap (enough steps to fold it several times): one growing call
    site, its line, at its rate (within 5%)."""
    passed, details = True, []
    # As many steps as 250 s of the loop hold (some 13,000 on an H100):
    # the issue asks for at least 4 minutes, and GPUs differ in speed.
    args = argparse.Namespace(**{**vars(args), "timeout": max(args.timeout, 480)})
    r = run_cli(args, "long-resnet", [sys.executable, os.path.join(WORKLOADS, "steps_and_leaks.py"), "resnet",
                                     "250s", "{out}"], env={"CUDATRACE_MAX_SIZE": "64MiB"})
    main = next((p for p in (r.report or {"processes": []})["processes"] if p["tensors"]["actions"] > 0), None)
    if r.returncode != 0 or main is None or not r.data:
        return False, f"resnet: exit {r.returncode}: {r.stderr.strip()[-300:]}"
    steps, loop_seconds = r.data["steps"], r.data["loop_seconds"]
    found = (main["steps"] or {}).get("count", 0)
    peak = max((d["allocated_peak_bytes"] for d in main["tensors"]["devices"]), default=0)
    folded = r.report.get("folded") or {}
    ok = (r.trace_bytes <= 64 << 20 and folded.get("folded_events", 0) > 0 and peak == r.data["requested_peak"]
          and abs(found - steps) <= 1 and main["growing"] == [] and loop_seconds >= 240)
    passed &= ok
    details.append(f"resnet: {loop_seconds:.0f} s of steps; {r.trace_bytes} bytes, {folded.get('folded_events')} "
                   f"records folded, detail from {folded.get('detail_from_s')} s; {found} steps of {steps}; "
                   f"growing {len(main['growing'] or [])}; allocated peak {peak} vs {r.data['requested_peak']}"
                   f"{'' if ok else ' FAILED'}")
    steps = 1500
    r = run_cli(args, "long-append", [sys.executable, os.path.join(WORKLOADS, "steps_and_leaks.py"), "append",
                                     str(steps), "{out}"], env={"CUDATRACE_MAX_SIZE": "8MiB"})
    main = next((p for p in (r.report or {"processes": []})["processes"] if p["tensors"]["actions"] > 0), None)
    if r.returncode != 0 or main is None or not r.data:
        return False, " || ".join(details + [f"append: exit {r.returncode}: {r.stderr.strip()[-300:]}"])
    growing = main["growing"] or []
    at_line = [g for g in growing if growing_at(g, "steps_and_leaks.py", r.data["leak_line"])]
    rate = at_line[0]["bytes_per_step"] if at_line else 0
    expected = r.data["leak_bytes_per_step"]
    found = (main["steps"] or {}).get("count", 0)
    ok = (r.trace_bytes <= 8 << 20 and len(growing) == 1 and len(at_line) == 1 and abs(rate - expected) <= 0.05 * expected
          and abs(found - steps) <= 1)
    passed &= ok
    details.append(f"append: {r.trace_bytes} bytes; {found} steps of {steps}; growing "
                   f"{[(g['call_site'], g['bytes_per_step']) for g in growing]}; rate {rate} vs {expected}"
                   f"{'' if ok else ' FAILED'}")
    return passed, " || ".join(details)


def scenario_dataloader(args):
    r = run_cli(args, "loader", [sys.executable, os.path.join(WORKLOADS, "dataloader.py"), "{out}"])
    if r.returncode != 0 or not r.report:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    main = r.process(r.data["pid"])
    workers = r.data["workers"]  # two per epoch: workers are not persistent
    worker_device_use = [bool(r.process(w) and r.process(w)["devices"]) for w in workers]
    passed = (
        main is not None and main["exit_status"] == 0 and r.data["steps"] == 32 and len(workers) == 4
        and not any(worker_device_use) and main["host_pinned"]["allocations"] > 0 and r.report["complete"]
    )
    return passed, (
        f"{r.data['steps']} steps; workers {workers} traced without GPU memory: {not any(worker_device_use)}; "
        f"main exit {main and main['exit_status']}, pinned host allocations {main and main['host_pinned']['allocations']}, "
        f"device peak {main and main['devices'][0]['peak_bytes']} B"
    )


def scenario_killed(args):
    r = run_cli(args, "killed", [sys.executable, os.path.join(WORKLOADS, "killed_mid_training.py"), "{out}"])
    if not r.report or not r.data:
        return False, f"exit {r.returncode}: no report or no segment list: {r.stderr.strip()[-300:]}"
    p = r.process(r.data["pid"])
    live = live_keys(p) if p else {}
    segments = [(s["addr"], s["size"]) for s in r.data["segments"]]
    present = sum(1 for s in segments if s in live)
    passed = r.returncode == 137 and p is not None and p["exit_status"] == 137 and present == len(segments) > 0
    return passed, (
        f"cudatrace exit {r.returncode}; process exit_status {p and p['exit_status']}; "
        f"{present}/{len(segments)} PyTorch segments live at the kill are in the trace; complete {r.report['complete']}"
    )


def scenario_plain_preload(args):
    r = run_cli(args, "plain", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), "{out}"], plain_preload=True)
    if r.returncode != 0 or not r.report or not r.report["complete"]:
        return False, f"exit {r.returncode}, finished trace: {bool(r.report and r.report['complete'])}: {r.stderr.strip()[-300:]}"
    p = r.report["processes"][0]
    cached = sum(size for (address, size), api in live_keys(p).items() if api == "cudaMalloc")
    passed = len(r.report["processes"]) == 1 and p["exit_status"] == 0 and cached == r.data["reserved"]
    return passed, (
        f"trace written by the tree root's own collector; exit_status {p['exit_status']}; "
        f"cudaMalloc bytes live at exit {cached} vs torch reserved {r.data['reserved']}"
    )


def scenario_bytes_per_event(args):
    r = run_cli(args, "churn", [sys.executable, os.path.join(WORKLOADS, "allocation_churn.py"), "{out}"],
                env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    if r.returncode != 0 or not r.report:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    events = sum(p["events"] for p in r.report["processes"])
    per_event = r.trace_bytes / max(events, 1)
    return per_event <= 24 and events > 8000, f"{events} events in {r.trace_bytes} bytes: {per_event:.1f} bytes per event"


def scenario_torchrun(args):
    workdir = tempfile.mkdtemp(prefix="cudatrace-torchrun-")
    marker = os.path.join(workdir, "ranks")
    r = run_cli(args, "torchrun", [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29533",
                                   os.path.join(WORKLOADS, "torchrun_ranks.py"), marker])
    ranks = [json.load(open(f"{marker}.rank{i}")) for i in range(2) if os.path.exists(f"{marker}.rank{i}")]
    shutil.rmtree(workdir, ignore_errors=True)
    if r.returncode != 0 or not r.report or len(ranks) != 2:
        return False, f"exit {r.returncode}, ranks reported {len(ranks)}: {r.stderr.strip()[-300:]}"
    checks = []
    for rank in ranks:
        p = r.process(rank["pid"])
        cached = sum(size for (address, size), api in live_keys(p).items() if api == "cudaMalloc") if p else -1
        checks.append(p is not None and p["exit_status"] == 0 and cached == rank["reserved"] and rank["sum"] == 3.0)
    launcher = [p for p in r.report["processes"] if not p["devices"]]
    return all(checks), (
        f"{len(r.report['processes'])} processes in the trace ({len(launcher)} without GPU memory); "
        f"each rank found with exit 0 and cudaMalloc bytes live = its torch reserved: {checks}"
    )


def scenario_async_loop(args):
    build = tempfile.mkdtemp(prefix="cudatrace-nvcc-")
    binary = os.path.join(build, "async_loop")
    compiled = subprocess.run(["nvcc", "-O2", "-o", binary, os.path.join(WORKLOADS, "async_loop.cu")],
                              capture_output=True, text=True)
    if compiled.returncode != 0:
        return False, "nvcc failed: " + compiled.stderr.strip()[-200:]
    rows = []
    for round in range(5):
        r = run_cli(args, f"asyncloop{round}", [binary, "100000"])
        words = next((l.split() for l in r.stdout.splitlines() if l.startswith("async-loop")), None)
        if r.returncode != 0 or not r.report or not words:
            return False, f"round {round}: exit {r.returncode}: {r.stderr.strip()[-300:]}"
        allocations, frees = int(words[2]), int(words[4])
        p = next((p for p in r.report["processes"] if p["events"]), None)
        if p is None:
            return False, f"round {round}: no process with events in the trace"
        device = p["devices"][0]
        exact = (
            r.report["complete"] and r.report["lost_events"] == 0 and p["lost_events"] == 0
            and device["allocations"] == allocations and device["frees"] == frees
            and p["events"] == allocations + frees and device["live_bytes_at_exit"] == 0
        )
        rows.append((exact, p["events"], allocations + frees, p["lost_events"]))
    shutil.rmtree(build, ignore_errors=True)
    return all(row[0] for row in rows), "; ".join(
        f"run {i + 1}: {events}/{expected} events, lost {lost}" for i, (_, events, expected, lost) in enumerate(rows)
    )


def stacks_of(report):
    """Every call-site stack of the report: live at exit, at the peak and OOMs."""
    for process in report["processes"]:
        for device in process["devices"]:
            for site in device.get("live_at_exit_by_call_site", []) + device.get("peak_by_call_site", []):
                yield site["stack"]
            for oom in device["ooms"]:
                yield oom.get("stack", [])


def has_frame(report, file_suffix, line=None, function=None):
    return any(
        (f.get("file") or "").endswith(file_suffix)
        and (line is None or f.get("line") == line)
        and (function is None or f.get("function") == function)
        for stack in stacks_of(report)
        for f in stack
    )


def scenario_stacks(args):
    torch_run = run_cli(args, "stacks-torch", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), "{out}"])
    if torch_run.returncode != 0 or not torch_run.report:
        return False, f"torch exit {torch_run.returncode}: {torch_run.stderr.strip().splitlines()[-1:]}"
    model_line = has_frame(torch_run.report, "torch_train.py", 18)
    forward_line = has_frame(torch_run.report, "torch_train.py", 25)
    ctypes_run = run_cli(args, "stacks-ctypes", [sys.executable, os.path.join(WORKLOADS, "named_ctypes.py")])
    if ctypes_run.returncode != 0 or not ctypes_run.report:
        return False, f"ctypes exit {ctypes_run.returncode}: {ctypes_run.stderr.strip().splitlines()[-1:]}"
    named = has_frame(ctypes_run.report, "named_ctypes.py", 15, "reserve_workspace_for_audit")
    unnamed = sum(
        1
        for stack in stacks_of(torch_run.report)
        if stack and not any((f.get("file") or "").endswith(".py") for f in stack)
    )
    passed = model_line and forward_line and named
    return passed, (
        f"model built at torch_train.py:18 named: {model_line}; forward torch_train.py:25 named: {forward_line}; "
        f"ctypes reserve_workspace_for_audit named_ctypes.py:15: {named}; call sites without a Python frame: {unnamed}"
    )


def viz(args, command, pickle_path, extra=()):
    """`python -m torch.cuda._memory_viz COMMAND PICKLE`: (ok, stdout, last stderr line)."""
    done = subprocess.run(
        [sys.executable, "-m", "torch.cuda._memory_viz", command, pickle_path, *extra],
        capture_output=True, text=True, timeout=args.timeout,
    )
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    return done.returncode == 0, done.stdout, tail


def place_flamegraph_standin():
    """Puts our stand-in where every torch version looks for flamegraph.pl."""
    standin = os.path.join(WORKLOADS, "flamegraph_standin.py")
    cache = os.path.expanduser("~/.cache")
    os.makedirs(cache, exist_ok=True)
    for path in (os.path.join(cache, "flamegraph.pl"), f"/tmp/{os.getuid()}_flamegraph.pl"):
        shutil.copy(standin, path)
        os.chmod(path, 0o755)


def scenario_viewer_outputs(args):
    """Snapshots of real PyTorch runs through torch's own _memory_viz, and a leak."""
    place_flamegraph_standin()
    workdir = tempfile.mkdtemp(prefix="cudatrace-viz-")
    details, passed = [], True
    for name, argv, env in (
        ("train", [sys.executable, os.path.join(WORKLOADS, "torch_train.py"), os.path.join(workdir, "train.json")], {}),
        ("leak", [sys.executable, os.path.join(WORKLOADS, "leak_cycle.py"), os.path.join(workdir, "leak.json")],
         {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
    ):
        trace = os.path.join(workdir, f"{name}.trace")
        done = subprocess.run([args.cli, "run", "--force", "--preload", args.preload, "-o", trace, "--"] + argv,
                              env=dict(os.environ, **env), capture_output=True, text=True, timeout=args.timeout)
        if done.returncode != 0:
            return False, f"{name}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        snap = subprocess.run([args.cli, "snapshot", "--force", trace, "-o", os.path.join(workdir, name)],
                              capture_output=True, text=True)
        pickles = snap.stdout.split()
        if snap.returncode != 0 or not pickles:
            return False, f"{name}: snapshot exit {snap.returncode}: {snap.stderr.strip()}"
        pickle_path = pickles[0]
        results = {}
        for command in ("stats", "trace", "segments", "memory"):
            ok, out, tail = viz(args, command, pickle_path)
            results[command] = ok
            if not ok:
                details.append(f"{name} {command}: {tail}")
            elif command == "stats":
                segments_line = next((l for l in out.splitlines() if l.startswith("segments:")), "?")
                details.append(f"{name} stats {segments_line.strip()}")
        for command in ("trace_plot", "segment_plot"):
            ok, _, tail = viz(args, command, pickle_path, ("-o", os.path.join(workdir, f"{name}-{command}.html")))
            results[command] = ok
            if not ok:
                details.append(f"{name} {command}: {tail}")
        perfetto = subprocess.run([args.cli, "perfetto", "--force", "--format", "json", trace,
                                   "-o", os.path.join(workdir, f"{name}.json")],
                                  capture_output=True, text=True)
        html = subprocess.run([args.cli, "html", "--force", trace, "-o", os.path.join(workdir, f"{name}.html")],
                              capture_output=True, text=True)
        try:
            json.load(open(os.path.join(workdir, f"{name}.json")))
            perfetto_ok = perfetto.returncode == 0
        except (OSError, ValueError):
            perfetto_ok = False
        results["perfetto"] = perfetto_ok
        results["html"] = html.returncode == 0
        passed = passed and all(results.values())
        details.append(f"{name}: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in results.items()))
        if name == "leak":
            report = report_of(args, trace)
            top = None
            for process in report["processes"]:
                for device in process["devices"]:
                    sites = device.get("live_at_exit_by_call_site", [])
                    if sites:
                        top = sites[0]
            top_frame = None
            if top:
                top_frame = next((f for f in top["stack"] if (f.get("file") or "").endswith("leak_cycle.py")), None)
            leak_named = bool(top_frame and top_frame.get("line") == 20 and top["bytes"] >= 8 * (4 << 20))
            passed = passed and leak_named
            details.append(
                f"leak: top live-at-exit call site {top['bytes'] if top else 0} bytes in "
                f"{top['allocations'] if top else 0} allocations at "
                f"{top_frame.get('file', '').rsplit('/', 1)[-1] + ':' + str(top_frame.get('line')) if top_frame else 'no leak_cycle.py frame'}"
            )
    shutil.rmtree(workdir, ignore_errors=True)
    return passed, "; ".join(details)


MIB = 1 << 20
# NVLink multicast stays off on shared GPU hosts (see the device notes).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def nvcc(source, *flags):
    """Compiles tests/gpu/workloads/SOURCE; returns the binary's path."""
    build = tempfile.mkdtemp(prefix="cudatrace-nvcc-")
    binary = os.path.join(build, os.path.splitext(source)[0])
    subprocess.run(["nvcc", "-O2", "-o", binary, os.path.join(WORKLOADS, source), *flags], check=True,
                   capture_output=True, text=True)
    return binary


def explained(process, own, label, at_least=95.0):
    """Checks one traced process's footprint against the workload's own
    readings: the report's reference is NVML's per-process figure, it agrees
    with what the workload read, and `at_least` % of it (up to 105%) is
    explained. Returns (passed, one line with the table's figures)."""
    rows = [f for f in process.get("footprint", []) if f.get("at_exit")]
    if not rows:
        return False, f"{label}: no footprint"
    return explained_row(max(rows, key=lambda f: f["at_peak"]["reference_bytes"]), own, label, at_least)


def explained_row(f, own, label, at_least=95.0):
    """`explained` for one footprint row (one device of a process)."""
    own_nvml = own.get("nvml", {}).get(f["uuid"]) if isinstance(own.get("nvml"), dict) else own.get("nvml_total")
    # The workload read its memory before its exit path ran: compare with the
    # report's table at exit or at the peak, whichever that reading matches.
    when, b = min([("at exit", f["at_exit"]), ("at peak", f["at_peak"])],
                  key=lambda wb: abs(wb[1]["reference_bytes"] - (own_nvml or 0)))
    reference = b["reference_bytes"]
    agrees = own_nvml is not None and abs(reference - own_nvml) <= max(4 * MIB, reference // 50)
    passed = b["reference_source"] == "nvml-process" and agrees and at_least <= b["explained_percent"] <= 105.0
    owners = ", ".join(f"{o['owner']} {o['bytes'] / MIB:.0f}" for o in b["owners"][:4])
    own_text = f"{own_nvml / MIB:.0f}" if own_nvml is not None else "none"
    used = own.get("device_used")
    used_text = f"{used / MIB:.0f}" if used else "none"
    return passed, (
        f"{label} {f['name']}, {when}: reference {reference / MIB:.0f} MiB ({b['reference_source']}; the workload read NVML "
        f"{own_text}, cuMemGetInfo used {used_text}); explained {b['explained_percent']}% = owners [{owners}] + "
        f"pools {b['pools_beyond_live_bytes'] / MIB:.0f} + graphs {b['graph_bytes'] / MIB:.0f} + context "
        f"{b['context_bytes'] / MIB:.0f} + modules and kernels {b['modules_and_kernels_bytes'] / MIB:.0f} + streams and "
        f"events {b['streams_and_events_bytes'] / MIB:.0f} + executable graphs {b['graph_executables_bytes'] / MIB:.0f}; "
        f"unexplained {b['unexplained_bytes'] / MIB:.0f} MiB" + "".join(f"; note: {n}" for n in f.get("notes", []))
    )


def explain_scenario(args, name, argv, env=None, at_least=95.0):
    r = run_cli(args, name, argv, env=env)
    if r.returncode != 0 or not r.report or not r.data:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    process = r.process(r.data["pid"])
    if process is None:
        return False, "the workload's pid is not in the trace"
    return explained(process, r.data, name, at_least)


def scenario_explain_resnet(args):
    return explain_scenario(args, "resnet50", [sys.executable, os.path.join(WORKLOADS, "explain_resnet.py"), "{out}"])


def scenario_explain_cupy(args):
    return explain_scenario(args, "cupy", [sys.executable, os.path.join(WORKLOADS, "explain_cupy.py"), "{out}"])


def scenario_explain_jax(args):
    return explain_scenario(args, "jax", [sys.executable, os.path.join(WORKLOADS, "explain_jax.py"), "{out}"])


def scenario_explain_graph(args):
    binary = nvcc("explain_graph.cu", "-ldl")
    return explain_scenario(args, "graph", [binary, "{out}"])


def scenario_explain_streams(args):
    binary = nvcc("explain_streams.cu", "-ldl", "-cudart", "shared")
    return explain_scenario(args, "streams", [binary, "{out}"], at_least=97.0)


def scenario_explain_graph_exec(args):
    binary = nvcc("explain_graph_exec.cu", "-ldl", "-cudart", "shared")
    return explain_scenario(args, "graph-exec", [binary, "{out}"], at_least=97.0)


def gpu_count():
    done = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True)
    return len([line for line in done.stdout.splitlines() if line.startswith("GPU ")])


def scenario_explain_ddp(args):
    if gpu_count() < 2:
        return None, "skipped: needs 2 GPUs (run on nvidia-h200-x2)"
    workdir = tempfile.mkdtemp(prefix="cudatrace-ddp-")
    marker = os.path.join(workdir, "ranks")
    r = run_cli(args, "ddp", [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29544",
                              os.path.join(WORKLOADS, "explain_ddp.py"), marker], env=NO_MULTICAST)
    ranks = [json.load(open(f"{marker}.rank{i}")) for i in range(2) if os.path.exists(f"{marker}.rank{i}")]
    shutil.rmtree(workdir, ignore_errors=True)
    if r.returncode != 0 or not r.report or len(ranks) != 2:
        return False, f"exit {r.returncode}, ranks reported {len(ranks)}: {r.stderr.strip()[-300:]}"
    results = []
    for rank in ranks:
        process = r.process(rank["pid"])
        results.append((False, f"rank {rank['rank']} not in the trace") if process is None
                       else explained(process, rank, f"rank {rank['rank']}"))
    return all(p for p, _ in results), "; ".join(d for _, d in results)


def scenario_data_parallel(args):
    """Seed 001's shape: one process, ResNet-50 replicated on two GPUs by
    nn.DataParallel. Every device at least 97% explained: the second
    device's lazily loaded kernels are measured there too."""
    if gpu_count() < 2:
        return None, "skipped: needs 2 GPUs (run on nvidia-h200-x2)"
    r = run_cli(args, "data-parallel", [sys.executable, os.path.join(WORKLOADS, "data_parallel.py"), "{out}"])
    if r.returncode != 0 or not r.report or not r.data:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    process = r.process(r.data["pid"])
    rows = sorted((f for f in (process or {}).get("footprint", []) if f.get("at_exit")), key=lambda f: f["device"])
    if len(rows) != 2:
        return False, f"{len(rows)} devices in the footprint, not 2"
    results = [explained_row(f, r.data, f"device {f['device']}", at_least=97.0) for f in rows]
    ranks = r.report.get("ranks") or {}
    table_rows = len(ranks.get("rows", []))
    return all(p for p, _ in results) and table_rows == 2, "; ".join(d for _, d in results) + f"; rank table rows {table_rows}"


def scenario_ddp_parity(args):
    """DDP, 2 ranks on 2 GPUs, each with PyTorch's recorder on: per rank,
    our snapshot against the rank's own (segments, live blocks, alloc and
    free counts within 1%), through _memory_viz, and every byte explained
    (at least 97%); the report's rank table has both ranks, each with its
    RANK and host."""
    if gpu_count() < 2:
        return None, "skipped: needs 2 GPUs (run on nvidia-h200-x2)"
    workdir = tempfile.mkdtemp(prefix="cudatrace-ddp-parity-")
    prefix = os.path.join(workdir, "rank")
    trace = os.path.join(workdir, "run.trace")
    done = subprocess.run([args.cli, "run", "--force", "--preload", args.preload, "-o", trace, "--",
                           sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29555",
                           os.path.join(WORKLOADS, "ddp_parity.py"), prefix],
                          env=dict(os.environ, **NO_MULTICAST), capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        return False, f"exit {done.returncode}: {done.stderr.strip()[-400:]}"
    report = report_of(args, trace)
    snap = subprocess.run([args.cli, "snapshot", "--force", "--max-events", "all", trace,
                           "-o", os.path.join(workdir, "ours")], capture_output=True, text=True)
    ours = {int(p.rsplit(".", 2)[-2]): p for p in snap.stdout.split()}
    passed, details = True, []
    for rank in range(2):
        own = json.load(open(f"{prefix}.rank{rank}.json"))
        process = next((p for p in report["processes"] if p["pid"] == own["pid"]), None)
        if process is None or own["pid"] not in ours:
            passed = False
            details.append(f"rank {rank}: pid {own['pid']} has no process or no pickle")
            continue
        ok, parity, _ = compare_snapshots(args, f"{prefix}.rank{rank}.pickle", ours[own["pid"]])
        rows = [f for f in process.get("footprint", []) if f.get("at_exit") and f["device"] == rank]
        byte_ok, byte_text = explained_row(rows[0], own, f"rank {rank}", at_least=97.0) if rows else (False, "no footprint")
        named = process.get("rank") == rank and process.get("world_size") == 2 and bool(process.get("host"))
        passed &= ok and byte_ok and named
        details.append(f"rank {rank} (RANK {process.get('rank')}, host {process.get('host')}): {'; '.join(parity)}; {byte_text}")
    table = report.get("ranks") or {}
    text = subprocess.run([args.cli, "report", trace], capture_output=True, text=True).stdout
    opening = [line for line in text.splitlines() if line.startswith(("every rank", "  "))][:5]
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "ddp_rank_table.txt"), "w") as f:
            f.write("\n".join(opening) + "\n")
    ranked = sorted(r["rank"] for r in table.get("rows", []) if r["rank"] is not None)
    passed &= ranked == [0, 1]
    details.append(f"rank table: ranks {ranked}, outlier {table.get('outlier')}")
    shutil.rmtree(workdir, ignore_errors=True)
    return passed, " || ".join(details)


def scenario_launch_cost(args):
    """Host cost of a launch of an already-launched kernel: plain, traced,
    traced with --no-launch-hooks, interleaved nine times; medians compared."""
    binary = nvcc("launch_cost.cu", "-lcuda")
    runs = {kind: {"real": [], "refused": []} for kind in ("plain", "traced", "no hooks")}
    for _ in range(9):
        for kind, flags in [("plain", None), ("traced", []), ("no hooks", ["--no-launch-hooks"])]:
            workdir = tempfile.mkdtemp(prefix="cudatrace-launch-")
            prefix = [] if flags is None else [args.cli, "run", "--force", "--preload", args.preload, *flags, "-o",
                                               os.path.join(workdir, "t.trace"), "--"]
            done = subprocess.run(prefix + [binary, "100000"], capture_output=True, text=True, timeout=args.timeout)
            shutil.rmtree(workdir, ignore_errors=True)
            if done.returncode != 0:
                return False, f"{kind}: exit {done.returncode}: {done.stderr.strip()[-200:]}"
            values = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            runs[kind]["real"].append(float(values["real_median_ns"]))
            runs[kind]["refused"].append(float(values["refused_mean_ns"]))
    median = {kind: {what: sorted(v)[len(v) // 2] for what, v in figures.items()} for kind, figures in runs.items()}
    cost = refused_cost = median["traced"]["refused"] - median["plain"]["refused"]
    # The driver's own launch path varies by hundreds of ns from run to run:
    # the fake driver's, on this machine's CPU, leaves the hook alone in view.
    fake = os.environ.get("FAKE_CUDA_OUT")
    fake_text = ""
    if fake:
        fake_runs = {"plain": [], "traced": []}
        for _ in range(9):
            for kind in fake_runs:
                environment = dict(os.environ, LD_LIBRARY_PATH=os.path.join(fake, "lib"))
                workdir = tempfile.mkdtemp(prefix="cudatrace-fake-")
                if kind == "traced":
                    environment.update(LD_PRELOAD=args.preload, CUDATRACE_DIR=workdir)
                done = subprocess.run([os.path.join(fake, "bin", "bench_calls"), "20000"], env=environment,
                                      capture_output=True, text=True, timeout=args.timeout)
                shutil.rmtree(workdir, ignore_errors=True)
                values = dict(line.split() for line in done.stdout.splitlines() if line.strip())
                fake_runs[kind].append(int(values["launch_median_ns"]))
        fake_median = {kind: sorted(v)[4] for kind, v in fake_runs.items()}
        fake_cost = fake_median["traced"] - fake_median["plain"]
        cost = fake_cost
        fake_text = (f"Fake driver on this CPU (median of 9 runs, ns per launch): plain {fake_median['plain']}, traced "
                     f"{fake_median['traced']}: the hook costs {fake_cost} ns. ")
    MEASURED["launch_ns"] = max(cost, 0)
    return cost <= 30, fake_text + (
        f"medians of 9 interleaved runs. Refused launches (1,000,000 per run, mean ns each): plain "
        f"{median['plain']['refused']:.1f}, traced {median['traced']['refused']:.1f}, --no-launch-hooks "
        f"{median['no hooks']['refused']:.1f}: traced - plain {refused_cost:.1f} ns. Real launches (median of 100,000 per "
        f"run, ns): plain {median['plain']['real']:.0f}, traced {median['traced']['real']:.0f}, --no-launch-hooks "
        f"{median['no hooks']['real']:.0f}"
    )


#: Figures a scenario measured that a later one uses (per-call costs).
MEASURED = {}


def scenario_hook_cost(args):
    """The hook's cost per runtime call on the real driver: a C loop of
    cudaMallocAsync + cudaFreeAsync pairs 1 and 32 native frames deep,
    pinned to one core, plain and traced under `cudatrace run` (stacks none,
    native, all; the collector empties the spool as it goes, as in use), 20
    interleaved rounds.

    Judged by the medians of the raw figures, as the goal is written. Each
    process also times cudaStreamQuery, a call no hook sees: processes run at
    different speeds (on the H100 machine some 230, 350 or 410 ns a query),
    and which speed each process gets moves the raw medians by some 100 ns a
    call. For diagnosis only, the details also give the cost against each
    process's own query time and the raw medians within each speed state
    (tests/gpu/hook_cost_table.py). The first is not the verdict: one run gave
    it +117 / +146 where the raw medians and the comparison within a state
    both gave some +220 (GPU run 81)."""
    binary = nvcc("hook_cost.cu", "-cudart", "shared")
    variants = [("plain", None), ("none", "none"), ("native", "native"), ("all", "all")]
    depths = hook_cost_table.DEPTHS
    figures = {name: {key: [] for key in depths + ("query_ns",)} for name, _ in variants}
    core = str(min(2, (os.cpu_count() or 1) - 1))
    for _ in range(20):
        for name, stacks in variants:
            workdir = tempfile.mkdtemp(prefix="cudatrace-hook-cost-")
            argv = ["taskset", "-c", core, binary, "20000", "5"]
            if stacks:
                argv = [args.cli, "run", "--force", "--preload", args.preload, "--stacks", stacks, "-o",
                        os.path.join(workdir, "t.trace"), "--"] + argv
            done = subprocess.run(argv, env=dict(os.environ, TMPDIR=workdir), capture_output=True, text=True,
                                  timeout=args.timeout)
            shutil.rmtree(workdir, ignore_errors=True)
            if done.returncode != 0:
                return False, f"{name}: exit {done.returncode}: {done.stderr.strip()[-200:]}"
            values = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            for key in figures[name]:
                figures[name][key].append(float(values[key]))
    median = {name: {key: statistics.median(v) for key, v in f.items()} for name, f in figures.items()}
    # A pair is two program calls, each through the runtime hook and the driver hook.
    raw = {name: {key: (median[name][key] - median["plain"][key]) / 2 for key in depths} for name in median}
    processes = {name: [dict(zip(f, values)) for values in zip(*f.values())] for name, f in figures.items()}
    query, per_call = hook_cost_table.added_per_call(processes)
    MEASURED["hook_cost"] = {name: {key: 2 * value for key, value in costs.items()} for name, costs in raw.items()}
    passed = raw["none"]["depth1_ns"] <= 150 and raw["none"]["depth32_ns"] <= 150 and raw["all"]["depth32_ns"] <= 1000
    rows = "; ".join(
        f"{name}: depth 1 {median[name]['depth1_ns']:.0f} ns/pair (spread {min(figures[name]['depth1_ns']):.0f}–"
        f"{max(figures[name]['depth1_ns']):.0f}), depth 32 {median[name]['depth32_ns']:.0f} (spread "
        f"{min(figures[name]['depth32_ns']):.0f}–{max(figures[name]['depth32_ns']):.0f})"
        + ("" if name == "plain" else
           f", {raw[name]['depth1_ns']:+.0f} / {raw[name]['depth32_ns']:+.0f} ns per call (against each process's "
           f"query {per_call[name]['depth1_ns']:+.0f} / {per_call[name]['depth32_ns']:+.0f})")
        for name, _ in variants)
    queries = sorted(q for f in figures.values() for q in f["query_ns"])
    variant_queries = ", ".join(f"{name} {median[name]['query_ns']:.0f}" for name, _ in variants)
    states = "; ".join(
        f"query {low:.0f}–{high:.0f} ns ({counts['plain']} plain): "
        + ", ".join(f"{name} {a['depth1_ns']:+.0f} / {a['depth32_ns']:+.0f} ({counts[name]})" for name, a in added.items())
        for (low, high), counts, added in hook_cost_table.added_within_states(processes))
    return passed, (f"20 interleaved processes a variant pinned to core {core}; query times {queries[0]:.0f}–"
                    f"{queries[-1]:.0f} ns, median {query:.0f} (by variant: {variant_queries}): {rows}. Within "
                    f"speed states, raw medians per call: {states or 'no state with 3 processes of each'}")


def bootstrap_ratio(traced, plain, draws=4000, seed=7):
    """95% bootstrap interval of median(traced) / median(plain), resampling the per-process figures."""
    random_state = random.Random(seed)
    ratios = sorted(
        statistics.median(random_state.choices(traced, k=len(traced))) /
        statistics.median(random_state.choices(plain, k=len(plain)))
        for _ in range(draws))
    return ratios[int(draws * 0.025)], ratios[int(draws * 0.975)]


#: Traced variants of the ResNet cost runs: (stacks, tensors). The layers-
#: and-cost goals are for tensor tracking off; the tensors issue's for on.
TRACED_VARIANTS = {
    "all": ("all", "off"),
    "none": ("none", "off"),
    "tensors-all": ("all", "on"),
    "tensors-python": ("python", "on"),
}


def resnet_cost(args, label, environment, variants, goals, steps, rounds=10, judge="interval"):
    """ResNet-50 bs32 training steps in `rounds` interleaved processes per
    variant; each variant's median step against plain's, with a 95%
    bootstrap interval of the ratio. `goals` bounds the interval's upper end
    (`judge="interval"`) or the ratio of the medians (`judge="median"`).

    Ten rounds of four variants take about ten minutes, longer than one call
    on the GPU machine may run. With RESNET_COST_STATE=FILE each process's
    figure is kept in FILE as it comes (under the label), the rounds of
    earlier calls count, and RESNET_COST_ROUNDS=N runs N rounds in this call;
    the verdict waits for `rounds` processes a variant."""
    script = os.path.join(WORKLOADS, "resnet_steps.py")
    state_path = os.environ.get("RESNET_COST_STATE")
    state = {}
    if state_path and os.path.exists(state_path):
        state = json.load(open(state_path))
    # Step times differ more between machines than the goals: only rounds
    # from this very GPU count.
    machine = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    if state.get(label, {}).get("machine") != machine:
        if label in state:
            print(f"  {label}: the kept rounds came from another GPU; starting again", file=sys.stderr, flush=True)
        state[label] = {"machine": machine}
    steps_ms = {name: list(state[label].get(name, [])) for name in variants}
    done_rounds = min(len(v) for v in steps_ms.values())
    steps_ms = {name: v[:done_rounds] for name, v in steps_ms.items()}
    this_call = int(os.environ.get("RESNET_COST_ROUNDS", str(rounds)))
    started = time.perf_counter()
    for round_number in range(done_rounds, min(rounds, done_rounds + this_call)):
        if round_number:
            print(f"  {label}: round {round_number} of {rounds} done after {time.perf_counter() - started:.0f} s: "
                  + ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in steps_ms.items()), file=sys.stderr, flush=True)
        for name in variants:
            workdir = tempfile.mkdtemp(prefix="cudatrace-resnet-")
            out = os.path.join(workdir, "out.json")
            env = dict(os.environ, RESNET_STEPS=str(steps), **environment)
            argv = [sys.executable, script, out, "recorder" if name == "recorder" else "plain"]
            if name in TRACED_VARIANTS:
                stacks, tensors = TRACED_VARIANTS[name]
                argv = [args.cli, "run", "--force", "--preload", args.preload, "--stacks", stacks, "--tensors", tensors, "-o",
                        os.path.join(workdir, "t.trace"), "--"] + argv
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout)
            if done.returncode != 0 or not os.path.exists(out):
                shutil.rmtree(workdir, ignore_errors=True)
                return False, f"{name}: exit {done.returncode}: {done.stderr.strip()[-300:]}"
            steps_ms[name].append(json.load(open(out))["step_ms_median"])
            shutil.rmtree(workdir, ignore_errors=True)
            if state_path:
                state[label] = dict(steps_ms, machine=machine)
                json.dump(state, open(state_path, "w"))
    processes = min(len(v) for v in steps_ms.values())
    if processes < rounds:
        return False, (f"{label}: {processes} of {rounds} processes a variant so far (kept in {state_path}); "
                       "run again with the same RESNET_COST_STATE for the rest")
    plain = statistics.median(steps_ms["plain"])
    passed, rows = True, [f"plain {plain:.2f} ms"]
    for name in variants[1:]:
        ratio = statistics.median(steps_ms[name]) / plain
        low, high = bootstrap_ratio(steps_ms[name], steps_ms["plain"])
        goal = goals.get(name)
        judged = high if judge == "interval" else ratio
        if goal is not None and judged > 1 + goal / 100:
            passed = False
        rows.append(f"{name} {(ratio - 1) * 100:+.1f}% [95% interval {(low - 1) * 100:+.1f}%, {(high - 1) * 100:+.1f}%]"
                    + (f" (goal <= {goal}%, {'the interval' if judge == 'interval' else 'the medians'})"
                       if goal is not None else ""))
    detail = f"{label}, medians of {processes} interleaved processes each ({steps} steps): " + "; ".join(rows)
    if label == "caching allocator":
        passed_counts, counts_text = counted_cost(args, environment, plain)
        passed = passed and passed_counts
        detail += "; " + counts_text
    return passed, detail


def counted_cost(args, environment, step_ms):
    """The caching allocator's traced cost from counts: driver allocation
    events and kernel launches per step, times their measured per-call costs
    (scenarios z and v, when they ran), over the step time."""
    workdir = tempfile.mkdtemp(prefix="cudatrace-resnet-count-")
    out = os.path.join(workdir, "out.json")
    done = subprocess.run([sys.executable, os.path.join(WORKLOADS, "resnet_steps.py"), out, "count"],
                          env=dict(os.environ, RESNET_STEPS="10", **environment), capture_output=True, text=True,
                          timeout=args.timeout)
    if done.returncode != 0:
        return False, f"count run: exit {done.returncode}: {done.stderr.strip()[-200:]}"
    counts = json.load(open(out))
    shutil.rmtree(workdir, ignore_errors=True)
    events = counts["driver_allocs_per_step"] + counts["driver_frees_per_step"]
    launches = counts["launches_per_step"]
    hook = MEASURED.get("hook_cost")
    event_ns = hook["all"]["depth32_ns"] / 2 if hook else 1000.0
    launch_ns = MEASURED.get("launch_ns", 30.0)
    share = (events * event_ns + launches * launch_ns) / (step_ms * 1e6) * 100
    event_source = "measured by z" if hook else "the 1 µs goal"
    launch_source = "measured by v" if "launch_ns" in MEASURED else "v's 30 ns bound"
    return share <= 1.0, (f"from counts: {events:.1f} driver events and {launches} launches per step, at {event_ns:.0f} ns "
                          f"({event_source}) and {launch_ns:.0f} ns ({launch_source}) each: {share:.3f}% of the step "
                          f"(goal <= 1%)")


def scenario_resnet_caching(args):
    return resnet_cost(args, "caching allocator", {}, ["plain", "all", "none", "recorder"], {"all": 3.0}, steps=30)


def scenario_resnet_async(args):
    return resnet_cost(args, "cudaMallocAsync backend", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
                       ["plain", "all", "none"], {"all": 10.0, "none": 3.0}, steps=30)


def scenario_resnet_no_caching(args):
    return resnet_cost(args, "no caching", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, ["plain", "all", "none"],
                       {"all": 10.0, "none": 3.0}, steps=12)


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")


def snapshot_contents(pickle_path):
    """(PyTorch segments as {(address, size)}, live blocks as {(address, size)},
    counts of each trace action) of a snapshot pickle."""
    import pickle
    with open(pickle_path, "rb") as f:
        snap = pickle.load(f)
    segments = {(s["address"], s["total_size"]) for s in snap["segments"]}
    live = {(b["address"], b["size"]) for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    actions = collections.Counter(e["action"] for trace in snap["device_traces"] for e in trace)
    return snap, segments, live, actions


def compare_snapshots(args, torch_pickle, our_pickle):
    """PyTorch's own snapshot against ours of the same process: the same
    segments and live blocks, alloc and free counts within 1%, and ours
    through every `_memory_viz` command. Returns (passed, details, ours)."""
    theirs, their_segments, their_live, their_actions = snapshot_contents(torch_pickle)
    ours, our_segments, our_live, our_actions = snapshot_contents(our_pickle)
    details, passed = [], True
    missing = their_segments - our_segments
    passed &= not missing
    details.append(f"segments: PyTorch {len(their_segments)}, ours {len(our_segments)} "
                   f"({len(our_segments - their_segments)} outside PyTorch), missing {len(missing)}"
                   + (f" e.g. {[(hex(a), n) for a, n in sorted(missing)[:3]]}" if missing else ""))
    # Outside PyTorch's segments each allocation is a block of its own.
    starts = sorted(their_segments)
    def in_theirs(block):
        return any(a <= block[0] < a + size for a, size in starts)
    ours_inside = {b for b in our_live if in_theirs(b)}
    passed &= their_live == ours_inside
    odd = sorted(their_live ^ ours_inside)[:4]
    if odd:
        details.append(f"differing blocks e.g. {[(hex(a), n, 'theirs' if (a, n) in their_live else 'ours') for a, n in odd]}")
    details.append(f"live blocks in PyTorch's segments: PyTorch {len(their_live)}, ours {len(ours_inside)}, "
                   f"only PyTorch's {len(their_live - ours_inside)}, only ours {len(ours_inside - their_live)}; "
                   f"outside them {len(our_live - ours_inside)}")
    # Our snapshot also shows every allocation outside PyTorch's segments
    # (NCCL's, cuBLAS's) as a block of its own: the counts compared are
    # those of actions inside PyTorch's segments, on both sides.
    our_inside = actions_within(ours, starts)
    for action in ("alloc", "free_completed", "segment_alloc"):
        a, b = their_actions.get(action, 0), our_actions.get(action, 0)
        inside = our_inside.get(action, 0)
        within = a > 0 and abs(a - inside) <= 0.01 * a
        if action != "segment_alloc":
            passed &= within
            details.append(f"{action}: PyTorch {a}, ours {inside} in PyTorch's segments ({b} in all)")
        else:
            details.append(f"{action}: PyTorch {a}, ours {b}")
    place_flamegraph_standin()
    for command in ("stats", "trace", "segments", "memory"):
        ok, _, tail = viz(args, command, our_pickle)
        passed &= ok
        if not ok:
            details.append(f"_memory_viz {command}: {tail}")
    return passed, details, ours


def actions_within(snapshot, segments):
    """Counts of a snapshot's trace actions whose address lies in one of
    `segments` ({(address, size)})."""
    ordered = sorted(segments)
    def inside(address):
        return any(a <= address < a + size for a, size in ordered)
    return collections.Counter(e["action"] for trace in snapshot["device_traces"] for e in trace
                               if "addr" in e and inside(e["addr"]))


def tensor_parity(args, name, argv, env=None):
    """Runs argv (which writes PyTorch's own snapshot to {torch}) under
    `cudatrace run`, snapshots the trace and compares the two pickles."""
    workdir = tempfile.mkdtemp(prefix=f"cudatrace-{name}-")
    torch_pickle = os.path.join(workdir, "torch.pickle")
    facts = os.path.join(workdir, "facts.json")
    trace = os.path.join(workdir, "run.trace")
    argv = [a.replace("{torch}", torch_pickle).replace("{facts}", facts) for a in argv]
    done = subprocess.run([args.cli, "run", "--force", "--preload", args.preload, "-o", trace, "--"] + argv,
                          env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        return False, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-3:]}", None
    snap = subprocess.run([args.cli, "snapshot", "--force", "--max-events", "all", trace,
                           "-o", os.path.join(workdir, "ours")], capture_output=True, text=True)
    pickles = snap.stdout.split()
    if snap.returncode != 0 or not pickles:
        return False, f"snapshot exit {snap.returncode}: {snap.stderr.strip()}", None
    passed, details, ours = compare_snapshots(args, torch_pickle, pickles[0])
    report = report_of(args, trace)
    notes = ours.get("allocator_settings", {}).get("cudatrace_notes", [])
    details.append("; ".join(n for n in notes if n.startswith("tensors") or "PyTorch's default" in n))
    facts_data = json.load(open(facts)) if os.path.exists(facts) else None
    shutil.rmtree(workdir, ignore_errors=True)
    return passed, "; ".join(details), (report, facts_data)


def scenario_tensor_parity_leak(args):
    """Seed 000's leak (ResNet-50, zero_grad forgotten) with PyTorch's recorder
    on in the same process: the same segments and live blocks, alloc and free
    counts within 1%, and the report names the gradients' call site."""
    passed, detail, extra = tensor_parity(args, "leak", [
        sys.executable, os.path.join(EXAMPLES, "leak_zero_grad.py"), "--pytorch-snapshot", "{torch}", "--facts", "{facts}"])
    if extra is None:
        return passed, detail
    report, facts = extra
    main = next(p for p in report["processes"] if p["tensors"]["devices"])
    sites = main["tensors"]["devices"][0]["live_at_exit_by_call_site"]
    def in_backward(site):
        # Gradients are made by backward ops on the autograd engine's threads.
        # cuBLAS's workspace is made there too, on the first backward matmul.
        functions = [f.get("function") or "" for f in site["stack"]]
        return any("autograd::Engine" in f for f in functions) and not any("Workspace" in f for f in functions)

    def op_name(site):
        frame = next((f for f in site["stack"] if "_backward" in (f.get("function") or "")), None)
        return (frame or {}).get("function", "?").split("(")[0][-50:]
    grad_sites = [s for s in sites if in_backward(s)]
    grad_bytes = sum(s["bytes"] for s in grad_sites)
    named = bool(grad_sites) and grad_bytes == facts["gradient_bytes"]
    return passed and named, (f"{detail}; gradients {facts['gradients']} of {facts['gradient_bytes']} B; "
                              f"live-at-exit call sites in backward {len(grad_sites)} holding {grad_bytes} B, "
                              f"largest {grad_sites[0]['bytes'] if grad_sites else 0} B at {op_name(grad_sites[0]) if grad_sites else '-'}")


def scenario_tensor_cases(args):
    """record_stream, empty_cache, an OOM, a graph's private pool and a
    MemPool, with and without expandable segments: parity with PyTorch's
    recorder in the same process."""
    passed, details = True, []
    for label, env in (("default", {}), ("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})):
        ok, detail, _ = tensor_parity(args, f"cases-{label}", [
            sys.executable, os.path.join(WORKLOADS, "tensor_cases.py"), "{torch}"], env)
        passed &= ok
        details.append(f"{label}: {detail}")
    return passed, " || ".join(details)


def scenario_resnet_tensors(args):
    """The tensors issue's cost goal: ResNet-50 with the caching allocator,
    tensors on with the default stacks (all) and with Python stacks, against
    plain, with PyTorch's recorder in the same table. The issue asks for at
    most 5% and 3% a step, judged as this project compares step times:
    medians of the processes' medians (the interval is shown beside them)."""
    return resnet_cost(args, "tensors, caching allocator", {},
                       ["plain", "tensors-all", "tensors-python", "recorder"],
                       {"tensors-all": 5.0, "tensors-python": 3.0}, steps=30, judge="median")


GIB = 1 << 30


def limit_refusals(report):
    """Every refusal of the memory limit in a report, with its process's verdict."""
    return [(v, r) for v in (report or {}).get("memory_limit", []) for r in v["refusals"]]


def scenario_limit_queries(args):
    """`run --limit`: PyTorch, a static runtime, ctypes, CuPy and JAX are
    told of the smaller card, and refused past it as a real one refuses."""
    problems, details = [], []
    limit = 24 * GIB
    r = run_cli(args, "limit-torch-queries", [sys.executable, os.path.join(WORKLOADS, "limit_torch.py"), "queries",
                                              "{out}"], options=["--limit", "24GiB"])
    if r.data is None:
        return False, f"torch queries: exit {r.returncode}: {r.stderr.strip()[-300:]}"
    details.append(f"torch: mem_get_info ({r.data['free']}, {r.data['total']}), total_memory {r.data['total_memory']}")
    if r.data["total"] != limit or r.data["total_memory"] != limit or not 23 * GIB < r.data["free"] <= limit:
        problems.append("torch was not told 24 GiB")

    binary = nvcc("limit_static.cu", "-lcuda")
    linked = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    real = subprocess.run([binary, str(1 << 40)], capture_output=True, text=True, timeout=120)
    real_said = dict(l.split(" ", 1) for l in real.stdout.splitlines())
    r = run_cli(args, "limit-static", [binary, str(5 * GIB)], options=["--limit", "4GiB"])
    said = dict(l.split(" ", 1) for l in r.stdout.splitlines())
    refused = limit_refusals(r.report)
    entry_points = ["cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocPitch_v2", "cuMemCreate", "cuArray3DCreate_v2"]
    differ = [e for e in entry_points if said.get(e) != real_said.get(e)]
    details.append(f"static runtime under 4 GiB: cudaMemGetInfo {said.get('cudaMemGetInfo')}, totalGlobalMem "
                   f"{said.get('totalGlobalMem')}, cudaMalloc(5 GiB) {said.get('cudaMalloc')}, cudaGetLastError "
                   f"{said.get('cudaGetLastError')}; refused (result, out-parameters) against the card's own OOM at "
                   f"1 TiB untraced: " + ", ".join(f"{e} {said.get(e)} / {real_said.get(e)}" for e in entry_points)
                   + f"; refusals in the trace: {[x['api'] for _, x in refused]}")
    if (said.get("totalGlobalMem") != str(4 * GIB) or not said.get("cudaMemGetInfo", "").endswith(f" {4 * GIB}")
            or said.get("cudaMalloc") != "2" or said.get("cudaGetLastError") != "2" or differ
            or "libcudart" in linked):
        problems.append(f"static runtime (out-parameters differ: {differ})")

    r = run_cli(args, "limit-raw", [sys.executable, os.path.join(WORKLOADS, "limit_raw.py"), "{out}"],
                options=["--limit", "4GiB"])
    if r.data is None:
        return False, f"ctypes/CuPy: exit {r.returncode}: {r.stderr.strip()[-300:]}"
    refused = limit_refusals(r.report)
    details.append(f"ctypes cudaMalloc 3 GiB {r.data['ctypes_within']}, then 2 GiB {r.data['ctypes_past']}; CuPy 3 GiB "
                   f"{r.data['cupy_within']}, then 2 GiB: {r.data['cupy_past']}; cupy.empty 2 GiB: "
                   f"{r.data['cupy_array_past']}; refusals in the trace: {[x['api'] for _, x in refused]}")
    if (r.data["ctypes_within"] != 0 or r.data["ctypes_past"] != 2 or r.data["cupy_within"] != "ok"
            or "cudaErrorMemoryAllocation" not in r.data["cupy_past"]
            or r.data["cupy_array_past"] != "OutOfMemoryError" or len(refused) < 3):
        problems.append("ctypes or CuPy")

    r = run_cli(args, "limit-jax", [sys.executable, os.path.join(WORKLOADS, "limit_jax.py"), "{out}"],
                options=["--limit", "24GiB"])
    if r.data is None:
        return False, f"JAX: exit {r.returncode}: {r.stderr.strip()[-300:]}"
    share = (r.data["bytes_limit"] or 0) / limit
    details.append(f"JAX preallocated {r.data['bytes_limit']} B = {100 * share:.2f}% of 24 GiB")
    if not 0.74 <= share <= 0.76:
        problems.append("JAX did not preallocate 75% of the limit")
    return not problems, ("; ".join(details) + (f". FAILED: {', '.join(problems)}" if problems else ""))


def scenario_limit_resnet(args):
    """`run --limit 24GiB` and `40GiB`: ResNet-50's batch grows by 16 until
    the limit refuses memory; NVML's per-process figure stays under the
    limit, the refused request would have taken it past 98%, PyTorch's OOM
    names the limit, the larger limit fits a larger batch, and each largest
    batch fits again when run under its limit."""
    workload = os.path.join(WORKLOADS, "limit_torch.py")
    problems, details, largest = [], [], {}
    for gib in (24, 40):
        limit = gib * GIB
        r = run_cli(args, f"limit-grow-{gib}", [sys.executable, workload, "grow", "{out}"],
                    options=["--limit", f"{gib}GiB"])
        if r.data is None or r.data.get("largest") is None:
            return False, f"{gib} GiB: exit {r.returncode}: {r.stderr.strip()[-300:]}"
        refused = limit_refusals(r.report)
        last = refused[-1][1] if refused else None
        verdict = next((v["verdict"] for v, _ in refused), None)
        reached = (r.data["nvml_at_oom"] + last["requested_bytes"]) / limit if last else 0
        largest[gib] = r.data["largest"]
        message = r.data["oom_message"]
        names_limit = f"total capacity of {gib}.00 GiB" in message
        details.append(f"{gib} GiB: largest batch {r.data['largest']}, refused at {r.data['oom_batch']}; NVML peak "
                       f"{r.data['nvml_peak'] / GIB:.2f} GiB, at the OOM {r.data['nvml_at_oom'] / GIB:.2f} GiB + the "
                       f"refused {last['requested_bytes'] / GIB if last else 0:.2f} GiB = {100 * reached:.1f}% of the "
                       f"limit; {len(refused)} refusals; OOM message names {gib}.00 GiB: {names_limit}; verdict: {verdict}")
        if r.data["nvml_peak"] > limit or reached <= 0.98 or not names_limit or not verdict:
            problems.append(f"{gib} GiB growth")
    if largest[40] <= largest[24]:
        problems.append("40 GiB fits no larger batch")
    for gib in (24, 40):
        r = run_cli(args, f"limit-fits-{gib}", [sys.executable, workload, "fits", str(largest[gib]), "{out}"],
                    options=["--limit", f"{gib}GiB"])
        trained = bool(r.data and r.data.get("trained"))
        verdicts = [v["verdict"] for v in (r.report or {}).get("memory_limit", [])]
        details.append(f"batch {largest[gib]} again under {gib} GiB: trained {trained}; {verdicts}")
        if not trained or not verdicts or not all(v.startswith("fits") for v in verdicts):
            problems.append(f"batch {largest[gib]} did not fit again under {gib} GiB")
    return not problems, ("; ".join(details) + (f". FAILED: {', '.join(problems)}" if problems else ""))


def scenario_limit_faults(args):
    """Issue 48's faults of the limit, on the real driver: a full spool disk
    and `ulimit -f` keep the limit per process and never kill the job; 64
    and 1,000 idle threads' credit refuses no allocation the card has room
    for; a thread with a cancellation pending makes the first CUDA calls
    and is cancelled at its own cancellation point; and ResNet-50 batches
    around the 24 GiB limit's edge get the verdict their ending earned
    (a process that died after a refusal did not fit)."""
    binary = nvcc("limit_faults.c", "-lcuda", "-lpthread")
    problems, details = [], []

    def preloaded(label, argv, wrapper=(), limit="2GiB", spools=None):
        workdir = tempfile.mkdtemp(prefix=f"cudatrace-{label}-")
        env = dict(os.environ, LD_PRELOAD=args.preload, CUDATRACE_LIMIT=limit,
                   CUDATRACE_DIR=spools or os.path.join(workdir, "spools"))
        for key in ("CUDATRACE_ROOT_PID", "CUDATRACE_COLLECTOR"):
            env.pop(key, None)
        done = subprocess.run([*wrapper, binary, *argv], env=env, capture_output=True, text=True,
                              timeout=args.timeout)
        shutil.rmtree(workdir, ignore_errors=True)
        return done

    # A full tmpfs under the spool folder, and a file-size limit of 100 KiB.
    full = tempfile.mkdtemp(prefix="cudatrace-full-")
    script = 'mount -t tmpfs -o size=1m tmpfs "$1" && { dd if=/dev/zero of="$1/fill" bs=4096 2>/dev/null; true; } && shift && exec "$@"'
    for label, wrapper, spools in (("full disk", ["unshare", "-m", "sh", "-c", script, "sh", full], full),
                                   ("ulimit -f 100", ["prlimit", "--fsize=102400", "--"], None)):
        done = preloaded("limit-disk", ["refuse", str(512 << 20), "8"], wrapper, spools=spools)
        refused = next((l for l in done.stdout.splitlines() if l.startswith("refused")), None)
        details.append(f"{label}: exit {done.returncode}, {refused}")
        if done.returncode != 0 or refused is None or not refused.startswith(("refused at 2 ", "refused at 3 ")):
            problems.append(label)
    shutil.rmtree(full, ignore_errors=True)

    # Idle threads' credit: then all that cuMemGetInfo says is free under
    # the limit (the limit less the device's used memory, the context
    # included), less 8 MiB, must be admitted. The threads may hold up to
    # two chunks of credit each (12 MiB under 24 GiB, 2 MiB under 4 GiB),
    # far more than 8 MiB in all.
    for count, limit in ((64, "24GiB"), (1000, "4GiB")):
        r = run_cli(args, f"limit-idle-{count}", [binary, "idle", str(count), "4096", f"-{8 << 20}"],
                    options=["--limit", limit])
        said = [l for l in r.stdout.splitlines() if l.startswith(("big", "thread refused"))]
        asked = next((l for l in r.stdout.splitlines() if l.startswith("free")), "no reading")
        details.append(f"{count} idle threads under {limit}, then {asked}: exit {r.returncode}, {said}")
        if r.returncode != 0 or said != ["big 0"]:
            problems.append(f"{count} idle threads")

    # A cancellation pending at the first CUDA call, with and without a
    # limit: the program ends as it does untraced (the real driver's own
    # first calls reach cancellation points, so the thread may be cancelled
    # inside them before it prints).
    plain = subprocess.run([binary, "cancel", str(1 << 20)], capture_output=True, text=True, timeout=args.timeout)
    details.append(f"cancel pending untraced: exit {plain.returncode}, {plain.stdout.splitlines()}")
    for options in ([], ["--limit", "24GiB"]):
        r = run_cli(args, "limit-cancel", [binary, "cancel", str(1 << 20)], options=options)
        details.append(f"cancel pending {' '.join(options) or 'no limit'}: exit {r.returncode}, "
                       f"{r.stdout.splitlines()}")
        if (r.returncode, r.stdout.splitlines()) != (plain.returncode, plain.stdout.splitlines()) \
                or not r.stdout.splitlines() or r.stdout.splitlines()[-1] != "cancelled yes":
            problems.append(f"cancel {' '.join(options)}")

    # ResNet-50 at the 24 GiB limit's edge: each verdict agrees with how
    # the process ended.
    workload = os.path.join(WORKLOADS, "limit_torch.py")
    for batch in (272, 288, 304):
        r = run_cli(args, f"limit-edge-{batch}", [sys.executable, workload, "fits", str(batch), "{out}"],
                    options=["--limit", "24GiB"])
        verdicts = [v for v in (r.report or {}).get("memory_limit", [])]
        trained = bool(r.data and r.data.get("trained"))
        text = [v.get("verdict", "") for v in verdicts]
        details.append(f"batch {batch}: exit {r.returncode}, trained {trained}, verdicts {text}")
        if not verdicts:
            problems.append(f"batch {batch}: no verdict")
        elif r.returncode != 0:
            if not all(t.startswith("did not fit") for t in text):
                problems.append(f"batch {batch}: died but 'fits'")
        elif trained != all(t.startswith("fits") for t in text):
            problems.append(f"batch {batch}: verdict disagrees with training")
    return not problems, ("; ".join(details) + (f". FAILED: {', '.join(problems)}" if problems else ""))


def scenario_limit_cost(args):
    """What `--limit` adds to an allocation and a free on the real driver:
    the C loop of cudaMallocAsync + cudaFreeAsync pairs (as scenario z),
    stacks none, with and without a limit (70 GiB: nothing refused), 16
    interleaved rounds of processes pinned to one core. Processes run at
    different speeds (scenario z's note), which moves raw medians by some
    100 ns a call: the verdict compares the two variants within each speed
    state (by each process's cudaStreamQuery time), where one has 3
    processes of each; the raw medians are shown beside. Goal: at most 50 ns
    a call."""
    binary = nvcc("hook_cost.cu", "-cudart", "shared")
    variants = [("plain", None), ("none", []), ("limit", ["--limit", "70GiB"])]
    keys = hook_cost_table.DEPTHS + ("query_ns",)
    figures = {name: {key: [] for key in keys} for name, _ in variants}
    core = str(min(2, (os.cpu_count() or 1) - 1))
    for _ in range(16):
        for name, options in variants:
            workdir = tempfile.mkdtemp(prefix="cudatrace-limit-cost-")
            argv = ["taskset", "-c", core, binary, "20000", "5"]
            if options is not None:
                argv = [args.cli, "run", "--force", "--preload", args.preload, "--stacks", "none", *options, "-o",
                        os.path.join(workdir, "t.trace"), "--"] + argv
            done = subprocess.run(argv, env=dict(os.environ, TMPDIR=workdir), capture_output=True, text=True,
                                  timeout=args.timeout)
            shutil.rmtree(workdir, ignore_errors=True)
            if done.returncode != 0:
                return False, f"{name}: exit {done.returncode}: {done.stderr.strip()[-200:]}"
            values = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            for key in keys:
                figures[name][key].append(float(values[key]))
    median = {name: {k: statistics.median(v) for k, v in f.items()} for name, f in figures.items()}
    # A pair is two program calls; each reaches the driver hook once.
    raw = {k: (median["limit"][k] - median["none"][k]) / 2 for k in hook_cost_table.DEPTHS}
    processes = {name: [dict(zip(f, values)) for values in zip(*f.values())] for name, f in figures.items()}
    states = hook_cost_table.added_within_states(processes, baseline="none")
    within = [added["limit"] for _, _, added in states if "limit" in added]
    MEASURED["limit_cost"] = {"raw": raw, "within_states": within}
    rows = ", ".join(f"{name} {median[name]['depth1_ns']:.0f} / {median[name]['depth32_ns']:.0f} (query "
                     f"{median[name]['query_ns']:.0f})" for name, _ in variants)
    state_text = "; ".join(
        f"query {low:.0f}-{high:.0f} ns ({counts['none']} none, {counts.get('limit', 0)} limit): "
        f"{added['limit']['depth1_ns']:+.1f} / {added['limit']['depth32_ns']:+.1f}"
        for (low, high), counts, added in states if "limit" in added)
    passed = bool(within) and all(a[k] <= 50 for a in within for k in hook_cost_table.DEPTHS)
    return passed, (
        f"16 interleaved processes a variant on core {core}, median ns per pair at depth 1 / 32: {rows}; raw medians: "
        f"the limit adds {raw['depth1_ns']:+.1f} / {raw['depth32_ns']:+.1f} ns a call; within speed states, ns a "
        f"call: {state_text or 'no state with 3 processes of each'}")


def _used(stdout, prefix):
    """N of a `PREFIX used N of M` line."""
    for line in stdout.splitlines():
        if line.startswith(prefix + " used "):
            return int(line.split()[2])
    return None


def scenario_small_stacks(args):
    """Issue 37, item 2: threads with small stacks, and handlers on small
    alternate stacks, that allocate: traced they end as untraced and use at
    most 4 KiB more of the stack, at --stacks none and all."""
    build = tempfile.mkdtemp(prefix="cudatrace-nvcc-")
    binary = os.path.join(build, "small_stack")
    compiled = subprocess.run(
        ["nvcc", "-o", binary, os.path.join(WORKLOADS, "small_stack.cu"), "-lcuda", "-lpthread"],
        capture_output=True, text=True)
    if compiled.returncode != 0:
        return False, "nvcc failed: " + compiled.stderr.strip()[-200:]
    cases = [
        ("thread", "20", "warm"), ("thread", "24", "warm"), ("thread", "20", "first"), ("thread", "64", "first"),
        ("altstack", "8", "warm"), ("altstack", "16", "warm"), ("altstack", "32", "warm"), ("altstack", "32", "first"),
        ("altstack", "64", "first"),
    ]
    passed, parts, checked = True, [], 0
    for case in cases:
        prefix = "stack" if case[0] == "thread" else "altstack"
        untraced = subprocess.run([binary, *case], capture_output=True, text=True, timeout=args.timeout)
        base = _used(untraced.stdout, prefix)
        label = " ".join(case)
        if untraced.returncode != 0 or base is None:
            parts.append(f"{label}: untraced exit {untraced.returncode}, not compared")
            continue
        figures = []
        for stacks in ("none", "all"):
            r = run_cli(args, f"small-stack-{stacks}", [binary, *case], options=("--stacks", stacks))
            used = _used(r.stdout, prefix)
            p = (r.report or {}).get("processes", [{}])[0] if r.report else {}
            if case[0] == "thread":
                d = (p.get("devices") or [{}])[0]
                recorded = d.get("allocations", 0) >= 1 and d.get("frees", 0) >= 1
            else:
                recorded = p.get("host_pinned", {}).get("allocations", 0) >= 3 and "failed 0" in r.stdout
            ok = r.returncode == 0 and used is not None and used - base <= 4096 and recorded
            passed &= ok
            checked += 1
            extra = "?" if used is None else f"{used - base:+d}"
            figures.append(f"{stacks} {extra} B{'' if ok else ' FAIL (exit %d, recorded %s)' % (r.returncode, recorded)}")
        parts.append(f"{label}: untraced {base} B, traced " + ", ".join(figures))
    return passed and checked > 0, "; ".join(parts)


def scenario_driver_reload(args):
    """Issue 37, item 3: a program loads the driver, unloads it and loads it
    again elsewhere; every allocation through the driver loaded again is
    recorded, and nothing crashes. Issue 48, item 29 (`held`): 1 MiB is
    still live at the dlclose. A driver that really unloads takes it along
    (recorded freed with the driver, 3 MiB live at exit); the real driver,
    loaded since cuInit, keeps it (nothing freed with it, 4 MiB live)."""
    build = tempfile.mkdtemp(prefix="cudatrace-gcc-")
    binary = os.path.join(build, "driver_reload")
    source = os.path.join(HERE, "..", "fake-cuda", "c", "driver_reload.c")
    compiled = subprocess.run(["gcc", "-o", binary, source, "-ldl"], capture_output=True, text=True)
    if compiled.returncode != 0:
        return False, "gcc failed: " + compiled.stderr.strip()[-200:]
    passed, parts = True, []
    for mode, allocations in (("lookup", 2), ("init", 2), ("alloc", 3), ("held", 3)):
        for plain in (False, True):
            r = run_cli(args, f"reload-{mode}", [binary, mode], plain_preload=plain)
            p = (r.report or {}).get("processes", [{}])[0] if r.report else {}
            d = (p.get("devices") or [{}])[0]
            flags = " ".join(l for l in r.stdout.splitlines() if l.split()[0] in ("unloaded", "moved"))
            went = mode == "held" and "unloaded 1" in r.stdout
            live = (4 << 20) if mode == "held" and not went else 3 << 20
            freed_with_driver = {"allocations": 1, "bytes": 1 << 20} if went else {"allocations": 0, "bytes": 0}
            ok = (
                r.returncode == 0 and "done" in r.stdout and (r.report or {}).get("complete") is True
                and d.get("allocations") == allocations and d.get("live_bytes_at_exit") == live
                and p.get("freed_with_driver") == freed_with_driver and p.get("lost_events") == 0
            )
            passed &= ok
            parts.append(f"{mode}{' plain' if plain else ''}: exit {r.returncode}, {flags}, "
                         f"{d.get('allocations')} allocations, live {d.get('live_bytes_at_exit')}, "
                         f"freed with the driver {p.get('freed_with_driver')}{'' if ok else ' FAIL'}")
    return passed, "; ".join(parts)


SCENARIOS = [
    ("a torch caching allocator", scenario_torch_caching),
    ("b expandable segments", scenario_torch_expandable),
    ("c cudaMallocAsync backend", scenario_torch_async),
    ("d nvcc static runtime", scenario_static_runtime),
    ("e ctypes + CuPy raw allocations", scenario_raw_driver),
    ("f out of memory", scenario_oom),
    ("g process without CUDA", scenario_no_cuda),
    ("h training step overhead", scenario_torch_overhead),
    ("i cudatrace run, two processes", scenario_two_processes),
    ("j DataLoader with 2 workers", scenario_dataloader),
    ("k SIGKILL mid-training", scenario_killed),
    ("l plain LD_PRELOAD tree", scenario_plain_preload),
    ("m trace bytes per event", scenario_bytes_per_event),
    ("n torchrun, 2 ranks", scenario_torchrun),
    ("o cudaMallocAsync loop, 5 runs", scenario_async_loop),
    ("p call stacks: torch and ctypes lines", scenario_stacks),
    ("q snapshot, perfetto, html; _memory_viz; a leak", scenario_viewer_outputs),
    ("r every byte explained: ResNet-50 step", scenario_explain_resnet),
    ("s every byte explained: CuPy small arrays", scenario_explain_cupy),
    ("t every byte explained: JAX preallocated pool", scenario_explain_jax),
    ("u every byte explained: CUDA graph with cudaMallocAsync", scenario_explain_graph),
    ("v launch hook cost", scenario_launch_cost),
    ("w every byte explained: DDP, 2 ranks on 2 GPUs (needs 2 GPUs)", scenario_explain_ddp),
    ("x every byte explained: 1,500 streams and 3,000 events", scenario_explain_streams),
    ("y every byte explained: a 4,000-node executable graph", scenario_explain_graph_exec),
    ("z hook cost per call: C loop", scenario_hook_cost),
    ("R1 ResNet-50 cost: caching allocator", scenario_resnet_caching),
    ("R2 ResNet-50 cost: cudaMallocAsync backend", scenario_resnet_async),
    ("R3 ResNet-50 cost: no caching", scenario_resnet_no_caching),
    ("T1 tensors: seed 000's leak, parity with PyTorch's recorder", scenario_tensor_parity_leak),
    ("U a child that cannot record is named, and why", scenario_unrecorded),
    ("P pause and resume a job started paused", scenario_pause_resume),
    ("S steps and growth: ResNet-50, GPT-2, seed 000, four leaks", scenario_steps_and_growth),
    ("L long runs under a size cap: ResNet-50 for over 4 minutes in 64 MiB, a leak in 8 MiB", scenario_long_run_folded),
    ("T2 tensors: ResNet-50 cost, caching allocator", scenario_resnet_tensors),
    ("T3 tensors: record_stream, empty_cache, OOM, graph pool, MemPool; expandable or not", scenario_tensor_cases),
    ("M1 memory limit: PyTorch, static runtime, ctypes, CuPy and JAX told and refused", scenario_limit_queries),
    ("M2 memory limit: ResNet-50's largest batch under 24 and 40 GiB", scenario_limit_resnet),
    ("M3 memory limit: what it adds to a call, C loop", scenario_limit_cost),
    ("M4 memory limit's faults: full disk, ulimit -f, idle threads, cancellation, verdicts at the edge",
     scenario_limit_faults),
    ("D1 every byte explained: DataParallel on 2 GPUs, each device (needs 2 GPUs)", scenario_data_parallel),
    ("D2 DDP on 2 GPUs: tensor parity per rank, _memory_viz, every byte, the rank table (needs 2 GPUs)", scenario_ddp_parity),
    ("F1 small stacks: 20-64 KiB threads and 8-16 KiB sigaltstacks that allocate", scenario_small_stacks),
    ("F2 the driver unloaded and loaded again elsewhere", scenario_driver_reload),
]

#: Parts of the suite that run separately, each within 5 minutes on an H100.
PARTS = {
    "1": "a,b,c,d,e,f,g,h,i",
    "2": "j,k,l,m,n,o,p",
    "3": "q,r,s,t,u,v,w,x,y",
    "4": "z,R1",
    "5": "R2",
    "6": "R3",
    "7": "T1,T3,U,P",
    "8": "T2",
    "9": "S",
    "10": "L",
    "11": "M1,M2,M3",
    "14": "M4",
    "12": "D1,D2,w",
    "13": "F1,F2",
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preload", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--part", default="", help="a part of the suite: " + ", ".join(
        f"{k} ({v})" for k, v in PARTS.items()))
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    for path in (args.preload, args.cli):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run cargo build --release first")
    wanted = [w for w in (args.only or PARTS.get(args.part, "")).split(",") if w]
    if args.part and args.part not in PARTS:
        sys.exit(f"no part {args.part}: the parts are {', '.join(PARTS)}")
    rows = []
    for name, scenario in SCENARIOS:
        if wanted and not any(name.split()[0] == w for w in wanted):
            continue
        try:
            passed, detail = scenario(args)
        except Exception as error:  # a broken scenario is a failed row, not a dead suite
            passed, detail = False, f"{type(error).__name__}: {error}"
        rows.append((name, "skip" if passed is None else "pass" if passed else "FAIL", detail))
        print(f"{rows[-1][1]:4}  {name}: {detail}", file=sys.stderr, flush=True)
    print("| scenario | result | details |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    sys.exit(0 if all(r[1] != "FAIL" for r in rows) else 1)


if __name__ == "__main__":
    main()
