#!/usr/bin/env python3
"""Compact table of an `ncu --page raw --csv` run: one line per launch with its kernel, grid, block,
duration, DRAM share, instructions, L2 sectors / requests from L1, and the largest stall reasons
(warps stalled per issued instruction). Usage: ncu_raw_table.py RAW.csv [MAX_LAUNCHES]"""
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    head, data = rows[start], rows[start + 2:]  # the row after the header holds the units
    col = {name: i for i, name in enumerate(head)}

    def get(r, name, default="?"):
        i = col.get(name)
        return r[i] if i is not None and i < len(r) else default

    stalls = [n for n in head if "issue_stalled" in n and n.endswith("per_issue_active.ratio")]
    for r in data[:limit]:
        name = get(r, "Kernel Name")[:28]
        top = []
        for n in stalls:
            try:
                top.append((float(get(r, n, "0").replace(",", "")), n))
            except ValueError:
                pass
        top.sort(reverse=True)
        short = " ".join(f"{n.split('stalled_')[1].split('_per_issue')[0]}={v:.2f}" for v, n in top[:5])
        print(f"{get(r, 'ID'):>4} {name:28} grid {get(r, 'launch__grid_size'):>6} blk {get(r, 'launch__block_size'):>4} "
              f"{get(r, 'gpu__time_duration.sum'):>9} ns dram {get(r, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):>6}% "
              f"inst {get(r, 'smsp__inst_executed.sum'):>10} l2sec {get(r, 'lts__t_sectors_srcunit_tex_op_read.sum'):>10} "
              f"l2req {get(r, 'lts__t_requests_srcunit_tex_op_read.sum'):>9} occ {get(r, 'sm__warps_active.avg.pct_of_peak_sustained_active'):>6} | {short}")


if __name__ == "__main__":
    main()
