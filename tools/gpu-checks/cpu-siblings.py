#!/usr/bin/env python3
"""Which of the process's CPUs share a physical core (a VM's lscpu may say one thread per core
while its vCPUs are a host's hyperthreads): single-threaded float32 matrix products on CPU `a`
alone, then on `a` and on each other CPU `b` at once (a process each). Where `a` slows down by
more than the threshold beside `b`, the two share a core (or its FMA units). Without torch: a
pure-Python loop (integer units, not FMAs; a weaker signal).
Usage: python3 tools/gpu-checks/cpu-siblings.py [--first 0] [--reps 200] [--size 384] [--json F]
Prints one line per CPU pair and a summary; --json writes them."""
import argparse
import json
import multiprocessing as mp
import os
import time

try:
    import torch
except ImportError:
    torch = None


def work(cpu, reps, size, out, index, start):
    os.sched_setaffinity(0, {cpu})
    if torch is not None:
        torch.set_num_threads(1)
        a = torch.randn(size, size)
        (a @ a).sum()  # warm
    start.wait()
    t = time.perf_counter()
    if torch is not None:
        for _ in range(reps):
            a = torch.tanh(a @ a * (1.0 / size))
    else:
        x = 0
        for i in range(reps * size * 500):
            x = (x * 31 + i) & 0xFFFFFFF
    out[index] = time.perf_counter() - t


def run(cpus, reps, size):
    out = mp.Array("d", len(cpus))
    start = mp.Barrier(len(cpus))
    procs = [mp.Process(target=work, args=(c, reps, size, out, i, start))
             for i, c in enumerate(cpus)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return list(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--size", type=int, default=384)
    p.add_argument("--threshold", type=float, default=1.25)
    p.add_argument("--json")
    o = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    a = o.first
    alone = min(run([a], o.reps, o.size)[0] for _ in range(3))
    rows = []
    for b in cpus:
        if b == a:
            continue
        pair = min(run([a, b], o.reps, o.size)[0] for _ in range(2))
        slow = pair / alone
        rows.append({"a": a, "b": b, "alone_s": alone, "beside_s": pair, "slowdown": slow})
        print(f"cpu {a} beside cpu {b}: {slow:.3f}x{'  <- shares a core' if slow > o.threshold else ''}")
    siblings = [r["b"] for r in rows if r["slowdown"] > o.threshold]
    # All of them at once: what 8 or 16 busy CPUs leave each (turbo, memory bus).
    everyone = run(cpus, o.reps, o.size)
    print(f"cpu {a}: alone {alone:.3f} s; siblings {siblings or 'none'}; with every CPU busy "
          f"each took {min(everyone) / alone:.3f}-{max(everyone) / alone:.3f}x")
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"rows": rows, "siblings": siblings,
                       "all_busy": [x / alone for x in everyone]}, f)


if __name__ == "__main__":
    main()
