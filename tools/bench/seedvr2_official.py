#!/usr/bin/env python3
"""The official SeedVR2 one-step upscale of one batch, timed per stage, for a side-by-side with
`wmbench seedvr2-upscale` (same shapes: random weights of the official 3B or 7B, the official VAE
with its slicing and memory limits, 58 text tokens, one 4k+1-frame batch at the networks' size).

The official code is imported at run time from a checkout given on the command line
(ByteDance-Seed/SeedVR; nothing of it is in this repository):

    python3 seedvr2_official.py --repo /path/to/SeedVR [--model 3b|7b] [--frames 21]
        [--height 720] [--width 1280] [--warmup 1] [--iters 2] [--text-tokens 58]
        [--dit-dtype bf16|fp32] [--dit-offload 1|0] [--compile 0|1]

It runs what projects/inference_seedvr2_3b.py's generation_loop runs for one clip: vae_encode
(bfloat16 VAE, causal slicing, memory limits), the condition, runner.inference under CUDA
autocast bfloat16 (one Euler step of the DiT at t = 1000, then vae_decode; `dit_offload` as the
script sets it: the DiT goes to the CPU during the decode and back), and the wavelet colour fix
(written here from ../shared/seedvr2-dit-spec.md §9.12: the readme's colorfix.py is not part of
SeedVR). --height × --width is the output the networks make: give multiples of 16 (1080p as the
official script crops it: 1072 × 1920). Prints one JSON object.

Needs torch ≥ 2.4 and, from the checkout's requirements, einops, omegaconf (with
antlr4-python3-runtime), diffusers and rotary-embedding-torch 0.5.3 (carry them as wheels to an
offline host). flash_attn and apex are replaced when absent: flash_attn_varlen_func by PyTorch's
scaled-dot-product attention per window, apex's fused norms by torch.nn's.
"""
import argparse
import json
import os
import sys
import time
import types

import torch
import torch.nn.functional as F


def install_shims():
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        module = types.ModuleType("flash_attn")

        def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                                   max_seqlen_k=None, dropout_p=0.0, softmax_scale=None,
                                   causal=False, **_):
            # q, k, v: [total, heads, dim]; one sequence (window) at a time.
            out = torch.empty_like(q)
            cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
            for i in range(len(cq) - 1):
                qs = q[cq[i]:cq[i + 1]].transpose(0, 1).unsqueeze(0)
                ks = k[ck[i]:ck[i + 1]].transpose(0, 1).unsqueeze(0)
                vs = v[ck[i]:ck[i + 1]].transpose(0, 1).unsqueeze(0)
                o = F.scaled_dot_product_attention(qs, ks, vs, scale=softmax_scale,
                                                   is_causal=causal)
                out[cq[i]:cq[i + 1]] = o[0].transpose(0, 1)
            return out

        module.flash_attn_varlen_func = flash_attn_varlen_func
        sys.modules["flash_attn"] = module
    try:
        import apex.normalization  # noqa: F401
    except ImportError:
        apex = types.ModuleType("apex")
        norm = types.ModuleType("apex.normalization")

        class FusedRMSNorm(torch.nn.RMSNorm):
            def __init__(self, normalized_shape, elementwise_affine=True, eps=1e-5):
                super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)

        class FusedLayerNorm(torch.nn.LayerNorm):
            def __init__(self, normalized_shape, elementwise_affine=True, eps=1e-5):
                super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)

        norm.FusedRMSNorm = FusedRMSNorm
        norm.FusedLayerNorm = FusedLayerNorm
        apex.normalization = norm
        sys.modules["apex"] = apex
        sys.modules["apex.normalization"] = norm


def wavelet_color_fix(content, style):
    """[T, 3, H, W]: the detail of `content` on the low band of `style` (five dilated 3×3
    binomial blurs, dilations 1..16, edges replicated)."""
    kernel = torch.tensor([[1., 2., 1.], [2., 4., 2.], [1., 2., 1.]], device=content.device,
                          dtype=content.dtype) / 16
    kernel = kernel.expand(3, 1, 3, 3)

    def bands(x):
        high, low = torch.zeros_like(x), x
        for level in range(5):
            r = 2 ** level
            nxt = F.conv2d(F.pad(low, (r, r, r, r), mode="replicate"), kernel, dilation=r,
                           groups=3)
            high = high + (low - nxt)
            low = nxt
        return high, low

    return bands(content)[0] + bands(style)[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", required=True, help="a checkout of ByteDance-Seed/SeedVR")
    p.add_argument("--model", choices=["3b", "7b"], default="3b")
    p.add_argument("--frames", type=int, default=21)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--text-tokens", type=int, default=58)
    p.add_argument("--dit-dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--dit-offload", type=int, default=1)
    p.add_argument("--compile", type=int, default=0)
    args = p.parse_args()
    if (args.frames - 1) % 4 or args.height % 16 or args.width % 16:
        p.error("--frames must be 1 + 4k, --height and --width multiples of 16")

    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)
    install_shims()
    repo = os.path.abspath(args.repo)
    sys.path.insert(0, repo)
    os.chdir(repo)
    from omegaconf import OmegaConf

    from common.config import create_object, load_config
    from common.distributed import get_device, init_torch
    from projects.video_diffusion_sr.infer import VideoDiffusionInfer

    config = load_config(os.path.join(f"./configs_{args.model}", "main.yaml"))
    runner = VideoDiffusionInfer(config)
    OmegaConf.set_readonly(runner.config, False)
    init_torch(cudnn_benchmark=False)
    # configure_runner without the checkpoints: random weights (the DiT's own initialisation).
    runner.configure_dit_model(device="cuda", checkpoint=None)
    if args.dit_dtype == "bf16":
        runner.dit.to(torch.bfloat16)
    if args.compile:
        runner.dit = torch.compile(runner.dit)
    vae_dtype = getattr(torch, runner.config.vae.dtype)
    runner.vae = create_object(runner.config.vae.model)
    runner.vae.requires_grad_(False).eval()
    runner.vae.to(device=get_device(), dtype=vae_dtype)
    if hasattr(runner.vae, "set_causal_slicing") and hasattr(runner.config.vae, "slicing"):
        runner.vae.set_causal_slicing(**runner.config.vae.slicing)
    if hasattr(runner.vae, "set_memory_limit"):
        runner.vae.set_memory_limit(**runner.config.vae.memory_limit)
    runner.configure_diffusion()

    device = get_device()
    txt_dim = runner.config.dit.model.txt_in_dim
    gen = torch.Generator(device="cpu").manual_seed(1)
    text_pos = torch.randn(args.text_tokens, txt_dim, generator=gen).to(torch.bfloat16)
    text_neg = torch.randn(64, txt_dim, generator=gen).to(torch.bfloat16)
    video = torch.rand(3, args.frames, args.height, args.width, generator=gen) * 2 - 1

    def sync():
        torch.cuda.synchronize(device)

    marks = {}
    original_decode = runner.vae_decode

    def timed_decode(latents):
        sync()
        marks["dit"] = time.perf_counter()
        out = original_decode(latents)
        sync()
        marks["decode"] = time.perf_counter()
        return out

    runner.vae_decode = timed_decode

    def one_batch():
        sync()
        start = time.perf_counter()
        cond_latents = runner.vae_encode([video.to(device)])
        sync()
        encoded = time.perf_counter()
        # generation_step: noise, the condition (augmentation strength 0), one DiT step, decode.
        noises = [torch.randn_like(x) for x in cond_latents]
        aug_noises = [torch.randn_like(x) for x in cond_latents]
        conditions = []
        for noise, aug, latent in zip(noises, aug_noises, cond_latents):
            t = torch.tensor([1000.0], device=device) * 0.0
            shape = torch.tensor(latent.shape[1:], device=device)[None]
            t = runner.timestep_transform(t, shape)
            conditions.append(runner.get_condition(
                noise, task="sr", latent_blur=runner.schedule.forward(latent, aug, t)))
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=True):
            samples = runner.inference(noises=noises, conditions=conditions,
                                       dit_offload=bool(args.dit_offload),
                                       texts_pos=[text_pos.to(device)],
                                       texts_neg=[text_neg.to(device)])
        sync()
        inferred = time.perf_counter()
        sample = samples[0][:, :args.frames].transpose(0, 1).float()
        reference = video[:, :args.frames].transpose(0, 1).to(device)
        fixed = wavelet_color_fix(sample, reference)
        ((fixed.clamp(-1, 1) * 0.5 + 0.5) * 255).round().to(torch.uint8).cpu()
        sync()
        end = time.perf_counter()
        return {"encode": encoded - start, "dit": marks["dit"] - encoded,
                "decode": marks["decode"] - marks["dit"], "color_fix": end - inferred,
                "total": end - start}

    with torch.no_grad():
        for _ in range(args.warmup):
            one_batch()
        torch.cuda.reset_peak_memory_stats(device)
        runs = [one_batch() for _ in range(args.iters)]
    mean = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
    out = {
        "bench": "seedvr2-official",
        "model": args.model,
        "dit_dtype": args.dit_dtype,
        "dit_offload": bool(args.dit_offload),
        "compile": bool(args.compile),
        "height": args.height,
        "width": args.width,
        "frames": args.frames,
        "text_tokens": args.text_tokens,
        "iters": args.iters,
        "encode_seconds": mean["encode"],
        "dit_seconds": mean["dit"],
        "decode_seconds": mean["decode"],
        "color_fix_seconds": mean["color_fix"],
        "other_seconds": mean["total"] - mean["encode"] - mean["dit"] - mean["decode"]
        - mean["color_fix"],
        "seconds": mean["total"],
        "best_seconds": min(r["total"] for r in runs),
        "fps": args.frames / mean["total"],
        "dit_fps": args.frames / mean["dit"],
        "peak_gpu_gib": torch.cuda.max_memory_allocated(device) / 2**30,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
