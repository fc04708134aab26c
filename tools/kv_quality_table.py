#!/usr/bin/env python3
"""Aggregates deltaserve-perplexity runs of the KV cache types into one table (issue 30).

    python3 tools/kv_quality_table.py RUNS.txt

RUNS.txt lines: "<file> <backend> <kv type> <the tool's JSON line>". Prints, per (backend, type),
the range over the files of KL mean, the largest KL p99, the lowest top-1 agreement and the
largest |delta ppl| / ppl, as a markdown table.
"""
import json
import sys
from collections import defaultdict


def main() -> int:
    rows = defaultdict(list)
    order = []
    for line in open(sys.argv[1]):
        parts = line.split(" ", 3)
        if len(parts) < 4 or not parts[3].startswith("{"):
            continue
        try:
            r = json.loads(parts[3])
        except json.JSONDecodeError:
            continue
        key = (parts[1], parts[2])
        if key not in rows:
            order.append(key)
        rows[key].append(r)
    print("| backend | KV type | files | KL mean | KL p99 (max) | top-1 (min) | max abs(delta ppl)/ppl |")
    print("|---|---|---|---|---|---|---|")
    for key in order:
        rs = [r for r in rows[key] if r.get("kl_mean") is not None]
        if not rs:
            continue
        kl = [r["kl_mean"] for r in rs]
        print("| %s | %s | %d | %.2e - %.2e | %.2e | %.2f%% | %.2e |" % (
            key[0], key[1], len(rs), min(kl), max(kl), max(r["kl_p99"] for r in rs),
            min(r["top1_pct"] for r in rs), max(abs(r["delta_ppl"]) / r["base_ppl"] for r in rs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
