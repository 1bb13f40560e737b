"""The hook-cost loop's figures (workloads/hook_cost.cu), judged per process.

Processes on the GPU machine run at different speeds: a `cudaStreamQuery`,
which no hook sees, takes some 230, 350 or 410 ns depending on the process,
and much else in it is slower too. Which speed each process of a variant
gets moves a median of raw times by as much as the hooks cost. Two views
that take the speed into account, for diagnosis (scenario z's verdict is
the raw medians'): each process's pair time against its own query time
(the median ratio of pair to query, traced minus plain, times the median
query time of all processes, over two calls a pair), which assumes that
a process's speed scales our cost as it scales the query, and does not
hold well (GPU run 81: +117 / +146 against some +220 by the other views);

and the raw medians compared within each speed state that has enough
processes (`added_within_states`), which assumes nothing of the kind.

As a program: `hook_cost_table.py RESULTS` prints the table of a results
file whose lines are `NAME key value key value ...` (the loop's output on
one line, after the variant's name; a name starting `fake:` is the loop
over the fake CUDA stack, which has no query time: raw medians only).
"""
import statistics
import sys

DEPTHS = ("depth1_ns", "depth32_ns")


def added_per_call(rows, baseline="plain"):
    """`rows`: variant name -> list of per-process dicts (DEPTHS and
    query_ns). Returns the median query time and, per variant and depth, the
    ns a call added over `baseline`."""
    query = statistics.median(v["query_ns"] for values in rows.values() for v in values)
    ratio = {name: {k: statistics.median(v[k] / v["query_ns"] for v in values) for k in DEPTHS}
             for name, values in rows.items()}
    return query, {name: {k: (ratio[name][k] - ratio[baseline][k]) * query / 2 for k in DEPTHS} for name in rows}


def speed_states(rows, gap=0.1):
    """The processes' speed states: the sorted query times of all processes,
    split where one is more than `gap` above the one before. Returns each
    state's (lowest, highest) query time."""
    times = sorted(v["query_ns"] for values in rows.values() for v in values)
    states, low = [], times[0]
    for before, after in zip(times, times[1:]):
        if after > before * (1 + gap):
            states.append((low, before))
            low = after
    states.append((low, times[-1]))
    return states


def added_within_states(rows, baseline="plain", least=3):
    """Per speed state with at least `least` processes of the baseline and
    of a variant: the raw medians' difference a call, depth by depth. The
    estimate of `added_per_call` without its assumption that a process's
    speed scales our cost as it scales the query."""
    result = []
    for low, high in speed_states(rows):
        within = {name: [v for v in values if low <= v["query_ns"] <= high] for name, values in rows.items()}
        if len(within[baseline]) < least:
            continue
        base = {k: statistics.median(v[k] for v in within[baseline]) for k in DEPTHS}
        added = {name: {k: (statistics.median(v[k] for v in values) - base[k]) / 2 for k in DEPTHS}
                 for name, values in within.items() if name != baseline and len(values) >= least}
        result.append(((low, high), {name: len(values) for name, values in within.items()}, added))
    return result


def raw_medians(rows):
    """Per variant and depth, the median ns a pair."""
    return {name: {k: statistics.median(v[k] for v in values) for k in DEPTHS} for name, values in rows.items()}


def main(path):
    rows = {}
    for line in open(path):
        words = line.split()
        if words:
            rows.setdefault(words[0], []).append(dict(zip(words[1::2], map(float, words[2::2]))))
    fake = {name: rows.pop(name) for name in list(rows) if name.startswith("fake:")}
    query, added = added_per_call(rows)
    raw = raw_medians(rows)
    print(f"median cudaStreamQuery time of all processes {query:.0f} ns")
    print(f"{'variant':<56} {'ns/pair d1':>10} {'d32':>6} {'raw added/call':>15} {'vs query d1':>12} {'d32':>6}"
          f" {'query':>6}")
    for name, values in rows.items():
        raw_added = [(raw[name][k] - raw["plain"][k]) / 2 for k in DEPTHS]
        print(f"{name:<56} {raw[name]['depth1_ns']:>10.0f} {raw[name]['depth32_ns']:>6.0f} "
              f"{raw_added[0]:>+7.0f} {raw_added[1]:>+7.0f} {added[name]['depth1_ns']:>+12.0f} "
              f"{added[name]['depth32_ns']:>+6.0f} {statistics.median(v['query_ns'] for v in values):>6.0f}"
              f"   ({len(values)} processes)")
    for (low, high), counts, within in added_within_states(rows):
        print(f"processes whose query took {low:.0f}-{high:.0f} ns ({counts['plain']} plain): "
              + "; ".join(f"{name} {a['depth1_ns']:+.0f} / {a['depth32_ns']:+.0f} ({counts[name]})"
                          for name, a in within.items()))
    if fake:
        medians = raw_medians(fake)
        plain, none = medians["fake:plain"], medians["fake:none"]
        print(f"fake runtime and driver on this CPU: plain {plain['depth1_ns']:.0f} / {plain['depth32_ns']:.0f} ns a "
              f"pair, --stacks none {none['depth1_ns']:.0f} / {none['depth32_ns']:.0f}: "
              f"{(none['depth1_ns'] - plain['depth1_ns']) / 2:+.0f} / {(none['depth32_ns'] - plain['depth32_ns']) / 2:+.0f} "
              f"ns a call")


if __name__ == "__main__":
    main(sys.argv[1])
