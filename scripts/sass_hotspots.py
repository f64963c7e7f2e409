"""Summarise an Nsight Compute source-page CSV (``ncu -i R --page source --csv --print-source sass``).

python3 scripts/sass_hotspots.py sass.csv

Prints the column names, the instruction count, where warp stall samples fall by opcode and by
stall reason, and the SASS lines with most samples (with their neighbours' opcodes), so that a
latency-bound kernel's chain can be read off: which loads, barriers and conversions the warps wait on.
"""
import collections
import csv
import sys


def _num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def main(path):
    rows = list(csv.reader(open(path, newline="")))
    head_i = next(i for i, r in enumerate(rows) if any("Source" == c.strip() or "Address" in c for c in r))
    head = rows[head_i]
    data = [r for r in rows[head_i + 1:] if len(r) == len(head)]
    print("columns:", head)
    col = {c: i for i, c in enumerate(head)}
    src = next(i for c, i in col.items() if c.strip() == "Source")
    samp = next((i for c, i in col.items() if "Warp Stall Sampling (All" in c), None)
    execd = next((i for c, i in col.items() if c.startswith("Instructions Executed")), None)
    stall_cols = [(c, i) for c, i in col.items() if c.startswith("stall_") or "Stall" in c and "Sampling" not in c]
    print("SASS lines:", len(data))
    if execd is not None:
        print("warp instructions executed:", sum(_num(r[execd]) for r in data))
    if samp is None:
        return
    total = sum(_num(r[samp]) for r in data) or 1.0
    by_op = collections.Counter()
    for r in data:
        by_op[r[src].split()[0].split(".")[0] if r[src].split() else "?"] += _num(r[samp])
    print("stall samples by opcode:", [(k, round(100 * v / total, 1)) for k, v in by_op.most_common(14)])
    if stall_cols:
        reasons = collections.Counter({c: sum(_num(r[i]) for r in data) for c, i in stall_cols})
        print("by reason:", [(k, round(100 * v / total, 1)) for k, v in reasons.most_common(10)])
    order = sorted(range(len(data)), key=lambda j: -_num(data[j][samp]))
    print("top lines (pct, index, sass):")
    for j in order[:30]:
        r = data[j]
        extra = " ".join(f"{c[:18]}={r[i]}" for c, i in stall_cols if _num(r[i]) > 0.2 * _num(r[samp]))
        print(f"{100 * _num(r[samp]) / total:5.1f}% #{j:4d} {r[src][:70]:70s} {extra}")


if __name__ == "__main__":
    main(sys.argv[1])
