#!/usr/bin/env python3
"""wasm_stages.py ENVOY_LOG: the Wasm filter's stage totals (filter/src/stages.rs) in the form of
the native module's stage file (`name count total_ns bucket...` per line): the last
`ferry-stages VM LINE|LINE|...` line Envoy logged for each worker's VM, summed over the VMs.
Prints nothing before any VM has logged."""

import sys


def main():
    last = {}  # VM -> its stage lines
    with open(sys.argv[1], errors="replace") as log:
        for line in log:
            at = line.find("ferry-stages ")
            if at < 0:
                continue
            parts = line[at:].strip().split(" ", 2)
            if len(parts) == 3:
                last[parts[1]] = parts[2].split("|")
    totals = {}  # name -> [count, total, buckets...]
    order = []
    for lines in last.values():
        for stage in lines:
            name, *numbers = stage.split(" ")
            numbers = [int(n) for n in numbers]
            if name not in totals:
                order.append(name)
                totals[name] = [0] * len(numbers)
            totals[name] = [a + b for a, b in zip(totals[name], numbers)]
    for name in order:
        print(name, *totals[name])


if __name__ == "__main__":
    main()
