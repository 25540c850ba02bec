#!/usr/bin/env python3
"""PyTorch baselines for `wmbench upscale --model ... --baseline THIS`.

The Real-ESRGAN networks written from ../shared/upscalers-spec.md (SRVGGNetCompact, RRDBNet),
random weights. Modes (--modes, comma-separated, in one process):
  eager          as the official inference scripts run them: fp16 (`half`), NCHW, one frame per
                 call; also the per-frame host round trip those scripts make (float32 upload,
                 fp16 model, float download)
  channels_last  eager on channels_last fp16
  compile        torch.compile(mode="max-autotune-no-cudagraphs") on channels_last fp16: the
                 strongest PyTorch a speed-minded user picks (its compile time is reported apart)
Each mode times --calls calls of --frames frames on device-resident input (synchronised) after
--warmup calls. Prints one JSON object: the first mode's numbers at the top level (fps, peak_mib;
what older callers read) and every mode under "modes". Needs only torch.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "realesr-animevideov3": ("srvgg", dict(num_feat=64, num_conv=16, upscale=4)),
    "realesr-general-x4v3": ("srvgg", dict(num_feat=64, num_conv=32, upscale=4)),
    "RealESRGAN_x4plus": ("rrdb", dict(scale=4, num_feat=64, num_block=23, num_grow_ch=32)),
    "RealESRGAN_x2plus": ("rrdb", dict(scale=2, num_feat=64, num_block=23, num_grow_ch=32)),
    "RealESRGAN_x4plus_anime_6B": ("rrdb", dict(scale=4, num_feat=64, num_block=6, num_grow_ch=32)),
}


class SRVGG(nn.Module):
    def __init__(self, num_feat, num_conv, upscale):
        super().__init__()
        self.upscale = upscale
        layers = [nn.Conv2d(3, num_feat, 3, 1, 1), nn.PReLU(num_feat)]
        for _ in range(num_conv):
            layers += [nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.PReLU(num_feat)]
        layers.append(nn.Conv2d(num_feat, 3 * upscale * upscale, 3, 1, 1))
        self.body = nn.ModuleList(layers)
        self.shuffle = nn.PixelShuffle(upscale)

    def forward(self, x):
        out = x
        for layer in self.body:
            out = layer(out)
        return self.shuffle(out) + F.interpolate(x, scale_factor=self.upscale, mode="nearest")


class RDB(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(f + i * g, g, 3, 1, 1) for i in range(4)])
        self.conv5 = nn.Conv2d(f + 4 * g, f, 3, 1, 1)

    def forward(self, x):
        feats = [x]
        for conv in self.convs:
            feats.append(F.leaky_relu(conv(torch.cat(feats, 1)), 0.2))
        return self.conv5(torch.cat(feats, 1)) * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.rdb1, self.rdb2, self.rdb3 = RDB(f, g), RDB(f, g), RDB(f, g)

    def forward(self, x):
        return self.rdb3(self.rdb2(self.rdb1(x))) * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, scale, num_feat, num_block, num_grow_ch):
        super().__init__()
        self.scale = scale
        unshuffle = {4: 1, 2: 2, 1: 4}[scale]
        self.unshuffle = unshuffle
        self.conv_first = nn.Conv2d(3 * unshuffle * unshuffle, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(num_feat, num_grow_ch) for _ in range(num_block)])
        self.conv_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_hr = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_last = nn.Conv2d(num_feat, 3, 3, 1, 1)

    def forward(self, x):
        feat = F.pixel_unshuffle(x, self.unshuffle) if self.unshuffle > 1 else x
        feat = self.conv_first(feat)
        feat = feat + self.conv_body(self.body(feat))
        lrelu = lambda t: F.leaky_relu(t, 0.2)
        feat = lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")))
        feat = lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")))
        return self.conv_last(lrelu(self.conv_hr(feat)))


def time_calls(fn, frame, calls, warmup, sync):
    for _ in range(warmup):
        fn(frame)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(frame)
    sync()
    return time.perf_counter() - start, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=sorted(PRESETS))
    ap.add_argument("--size", default="", help="WxH (default 1920x1080 SRVGG, 960x540 RRDB)")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--fp32", action="store_true", help="as the official --fp32")
    ap.add_argument("--modes", default="eager", help="eager,channels_last,compile")
    ap.add_argument("--frames", type=int, default=1, help="frames per call")
    args = ap.parse_args()

    family, kwargs = PRESETS[args.model]
    size = args.size or ("1920x1080" if family == "srvgg" else "960x540")
    width, height = (int(v) for v in size.split("x"))
    device = torch.device(args.device)
    torch.manual_seed(1234)
    net = (SRVGG(**kwargs) if family == "srvgg" else RRDBNet(**kwargs)).eval().to(device)
    half = not args.fp32 and device.type == "cuda"
    if half:
        net = net.half()
    dtype = torch.float16 if half else torch.float32
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.backends.cudnn.benchmark = True

    modes = {}
    out = None
    with torch.no_grad():  # (torch.compile and inference tensors do not mix in every version)
        for mode in [m for m in args.modes.split(",") if m]:
            frame = torch.rand(args.frames, 3, height, width, device=device, dtype=dtype)
            model = net
            entry = {}
            if mode in ("channels_last", "compile"):
                model = net.to(memory_format=torch.channels_last)
                frame = frame.contiguous(memory_format=torch.channels_last)
            if mode == "compile":
                compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
                start = time.perf_counter()
                compiled(frame)
                sync()
                entry["compile_seconds"] = time.perf_counter() - start
                model = compiled
            elif mode not in ("eager", "channels_last"):
                raise SystemExit("unknown mode " + mode)
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            seconds, out = time_calls(model, frame, args.calls, args.warmup, sync)
            entry["fps"] = args.calls * args.frames / seconds
            entry["peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else -1
            if mode == "eager":
                host = torch.rand(args.frames, 3, height, width)
                start = time.perf_counter()
                for _ in range(args.calls):
                    out = model(host.to(device).to(dtype)).float().cpu()
                entry["fps_with_host_round_trip"] = args.calls * args.frames / (
                    time.perf_counter() - start)
            modes[mode] = entry
            net = net.to(memory_format=torch.contiguous_format)

    first = next(iter(modes.values()))
    print(json.dumps({
        "bench": "realesrgan-pytorch",
        "model": args.model,
        "torch": torch.__version__,
        "device": str(device),
        "dtype": str(dtype),
        "width": width,
        "height": height,
        "frames_per_call": args.frames,
        "calls": args.calls,
        "fps": first["fps"],
        "fps_with_host_round_trip": first.get("fps_with_host_round_trip"),
        "peak_mib": first["peak_mib"],
        "modes": modes,
        "output_shape": list(out.shape),
    }, indent=2))


if __name__ == "__main__":
    main()
