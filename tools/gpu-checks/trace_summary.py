#!/usr/bin/env python3
"""Summarises a Chrome trace written by `wmbench vae-decode ... --trace PREFIX` or `wmbench
upscale --model M --trace FILE` (LibTorch's Kineto profiler): where each GPU computes, copies
and waits, and where each host thread blocks.

  python3 tools/gpu-checks/trace_summary.py TRACE.json [--bucket-ms 10] [--gap-ms 1] [--kernels N]

Prints, per GPU: kernel busy time (the union of its kernels' intervals), the span from its first
kernel to its last, idle gaps longer than --gap-ms (count, sum, the ten longest with the kernel
that ended each gap), copies by kind (bytes, seconds, GB/s), and a strip of --bucket-ms buckets
(digit d: the GPU computed d*10 to d*10+9 % of that bucket; '#' = 100 %); with --kernels N, the
N kernels that took the most GPU time, by name. Per host thread: its
CUDA runtime and driver calls by name (count, seconds), the blocking ones (synchronisations,
event waits, allocation) listed with their start when longer than --gap-ms.
"""
import argparse
import json
from collections import defaultdict

BLOCKING = ("Synchronize", "cudaMalloc", "cudaFree", "cudaMemcpy", "cudaHostAlloc",
            "cudaHostRegister", "cuMem", "cudaDeviceEnablePeerAccess", "cudaStreamQuery")


def union(spans):
    spans = sorted(spans)
    total, end, gaps = 0.0, None, []
    for s, e, name in spans:
        if end is None:
            end = s
        if s > end:
            gaps.append((s - end, end, name))
        if e > end:
            total += e - max(s, end)
            end = e
    return total, gaps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--bucket-ms", type=float, default=10.0)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--kernels", type=int, default=0,
                    help="also list the N kernels (by name) that took the most GPU time")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f).get("traceEvents", [])
    kernels = defaultdict(list)   # device -> (start us, end us, name)
    copies = defaultdict(lambda: defaultdict(lambda: [0, 0.0, 0]))  # device -> kind -> [bytes, us, n]
    calls = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))  # thread -> name -> [n, us]
    blocking = defaultdict(list)  # thread -> (start, dur, name)
    t0 = None
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        cat = e.get("cat", "")
        ts, dur = float(e["ts"]), float(e["dur"])
        t0 = ts if t0 is None else min(t0, ts)
        args = e.get("args", {})
        if cat == "kernel":
            dev = args.get("device", e.get("pid"))
            kernels[dev].append((ts, ts + dur, e.get("name", "?")))
        elif cat in ("gpu_memcpy", "gpu_memset"):
            dev = args.get("device", e.get("pid"))
            c = copies[dev][e.get("name", "?")]
            c[0] += int(args.get("bytes", 0))
            c[1] += dur
            c[2] += 1
        elif cat in ("cuda_runtime", "cuda_driver"):
            tid = e.get("tid")
            c = calls[tid][e.get("name", "?")]
            c[0] += 1
            c[1] += dur
            if dur >= a.gap_ms * 1000 and any(b in e.get("name", "") for b in BLOCKING):
                blocking[tid].append((ts, dur, e.get("name", "?")))
    if t0 is None:
        print("no events")
        return
    for dev in sorted(kernels, key=str):
        ks = kernels[dev]
        busy, gaps = union(ks)
        first = min(s for s, _, _ in ks)
        last = max(e for _, e, _ in ks)
        long_gaps = [g for g in gaps if g[0] >= a.gap_ms * 1000]
        print(f"GPU {dev}: {len(ks)} kernels, first at {(first - t0) / 1e3:.1f} ms, last end at "
              f"{(last - t0) / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms of span "
              f"{(last - first) / 1e3:.1f} ms ({100 * busy / max(1.0, last - first):.0f} %)")
        print(f"  gaps >= {a.gap_ms} ms: {len(long_gaps)}, {sum(g[0] for g in long_gaps) / 1e3:.1f} ms;"
              f" all gaps {sum(g[0] for g in gaps) / 1e3:.1f} ms")
        for g, at, name in sorted(long_gaps, reverse=True)[:10]:
            print(f"    {g / 1e3:8.2f} ms from {(at - t0) / 1e3:8.1f} ms, then {name[:90]}")
        if a.kernels > 0:
            by_name = defaultdict(lambda: [0, 0.0])
            for s, e, name in ks:
                by_name[name][0] += 1
                by_name[name][1] += e - s
            total = sum(v[1] for v in by_name.values())
            print(f"  kernels by time ({len(by_name)} names, {total / 1e3:.2f} ms in all):")
            for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:a.kernels]:
                print(f"    {us / 1e3:8.2f} ms {100 * us / max(total, 1.0):5.1f} % {n:5d} x "
                      f"{us / n:8.1f} us  {name[:110]}")
        for kind, (nbytes, us, n) in sorted(copies.get(dev, {}).items()):
            rate = nbytes / us / 1e3 if us else 0
            print(f"  {kind[:40]:<40} {n:6d} x, {nbytes / 1e9:8.3f} GB, {us / 1e3:8.1f} ms, "
                  f"{rate:7.1f} GB/s")
        # Utilisation strip.
        width = a.bucket_ms * 1000
        n = int((last - t0) // width) + 1
        fill = [0.0] * n
        for s, e, _ in sorted(ks):
            b = int((s - t0) // width)
            while s < e and b < n:
                edge = t0 + (b + 1) * width
                fill[b] += min(e, edge) - s
                s = min(e, edge)
                b += 1
        strip = "".join("#" if f >= width * 0.995 else str(min(9, int(10 * f / width)))
                        for f in fill)
        for i in range(0, len(strip), 100):
            print(f"  {i * a.bucket_ms:7.0f} ms |{strip[i:i + 100]}")
    for tid in sorted(calls, key=str):
        rows = sorted(calls[tid].items(), key=lambda kv: -kv[1][1])
        total = sum(v[1] for _, v in rows)
        print(f"host thread {tid}: {sum(v[0] for _, v in rows)} CUDA calls, {total / 1e3:.1f} ms")
        for name, (n, us) in rows[:8]:
            print(f"  {name[:48]:<48} {n:7d} x {us / 1e3:9.1f} ms")
        for ts, dur, name in blocking[tid][:25]:
            print(f"    blocked {dur / 1e3:8.2f} ms at {(ts - t0) / 1e3:8.1f} ms in {name}")


if __name__ == "__main__":
    main()
