#!/usr/bin/env python3
"""Sums an ncu CSV (--csv --print-units base --metrics gpu__time_duration.sum) per kernel name.

    python3 tools/kernel_lab/ncu_summary.py ncu.csv [TOP]

Prints, per kernel (template arguments cut), the launch count, the summed GPU time and its share,
biggest first, then the total: what one profiled decode step spends on the GPU, kernel by kernel.
"""
import csv
import sys
from collections import defaultdict


def short(name: str) -> str:
    name = name.split("(")[0]
    return name if len(name) <= 70 else name[:67] + "..."


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    total = defaultdict(float)
    count = defaultdict(int)
    with open(sys.argv[1], newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu prints log lines before the CSV
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(row.get("Metric Unit", ""), 1e-3)
        key = short(row["Kernel Name"])
        total[key] += value * scale
        count[key] += 1
    grand = sum(total.values())
    if grand == 0:
        print("no kernel times found")
        return 1
    print(f"{'kernel':72s} {'launches':>8s} {'us':>10s} {'share':>6s}")
    for key, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{key:72s} {count[key]:8d} {us:10.1f} {100 * us / grand:5.1f}%")
    print(f"{'total':72s} {sum(count.values()):8d} {grand:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
