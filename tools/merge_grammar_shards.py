#!/usr/bin/env python3
"""Adds up deltaserve-bench-grammar shards (--shard I/N --times FILE) into the figures one run
over all schemas prints: schemas accepted, verdicts, compile and per-token mask times.

usage: merge_grammar_shards.py TIMES_FILE...
"""
import sys
from collections import Counter


def pct(values, p):
    """The same rank rule as bench_grammar.cpp's pct()."""
    if not values:
        return 0.0
    k = min(len(values) - 1, int(p / 100.0 * len(values)))
    return sorted(values)[k]


def main(paths):
    compile_us, mask_us, counts, refused = [], [], Counter(), Counter()
    for path in paths:
        with open(path) as f:
            for line in f:
                kind, *rest = line.split()
                if kind == "c":
                    compile_us.append(float(rest[0]))
                elif kind == "m":
                    mask_us.append(float(rest[0]))
                elif kind == "n":
                    counts[rest[0]] += int(rest[1])
                elif kind == "r":
                    refused[rest[0]] += int(rest[1])
    schemas = max(counts["schemas"], 1)
    print(f"shards: {len(paths)}")
    print(f"schemas: {counts['accepted']} accepted / {counts['schemas']} total "
          f"({100.0 * counts['accepted'] / schemas:.1f}%)")
    print("refused by keyword: " + " ".join(f"{k}={n}" for k, n in sorted(refused.items())))
    print(f"instance verdicts (compact + spaced serializations): {counts['right']} right, {counts['wrong']} wrong")
    print(f"mask/accept disagreements: {counts['mismatch']}")
    avg = lambda v: sum(v) / len(v) if v else 0.0
    print(f"compile us: avg {avg(compile_us):.0f} p50 {pct(compile_us, 50):.0f} p99 {pct(compile_us, 99):.0f} "
          f"max {pct(compile_us, 100):.0f}")
    print(f"mask us ({len(mask_us)} masks): avg {avg(mask_us):.1f} p50 {pct(mask_us, 50):.1f} "
          f"p99 {pct(mask_us, 99):.1f} p99.9 {pct(mask_us, 99.9):.1f} max {pct(mask_us, 100):.1f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
