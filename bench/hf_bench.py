#!/usr/bin/env python3
"""Random models of real shapes, and transformers' own decode speed on them.

  python3 bench/hf_bench.py make DIR --preset mamba-130m   # random weights, save_pretrained
  python3 bench/hf_bench.py bench DIR [-n 128] [--dtype float32]

`bench` times greedy `model.generate` on the GPU (CUDA events around the
whole call, after a warm-up), the way a user of transformers would decode,
and prints one JSON line. transformers runs its reference PyTorch path when
the mamba_ssm kernels are not installed; the JSON says which.
"""
import argparse
import json
import time

import torch
import transformers

PRESETS = {
    "mamba-130m": ("MambaConfig", "MambaForCausalLM",
                   dict(hidden_size=768, num_hidden_layers=24, vocab_size=50280, state_size=16,
                        expand=2, conv_kernel=4, tie_word_embeddings=True)),
    "mamba-1.4b": ("MambaConfig", "MambaForCausalLM",
                   dict(hidden_size=2048, num_hidden_layers=48, vocab_size=50280, state_size=16,
                        expand=2, conv_kernel=4, tie_word_embeddings=True)),
    "mamba-2.8b": ("MambaConfig", "MambaForCausalLM",
                   dict(hidden_size=2560, num_hidden_layers=64, vocab_size=50280, state_size=16,
                        expand=2, conv_kernel=4, tie_word_embeddings=True)),
    "mamba2-2.7b": ("Mamba2Config", "Mamba2ForCausalLM",
                    dict(hidden_size=2560, num_hidden_layers=64, vocab_size=50288, state_size=128,
                         expand=2, conv_kernel=4, num_heads=80, head_dim=64, n_groups=1,
                         chunk_size=256, tie_word_embeddings=True)),
    "falcon-mamba-7b": ("FalconMambaConfig", "FalconMambaForCausalLM",
                        dict(hidden_size=4096, num_hidden_layers=64, vocab_size=65024,
                             state_size=16, expand=2, conv_kernel=4, mixer_rms_eps=1e-6,
                             tie_word_embeddings=False)),
    # Qwen3-Next-80B's Gated DeltaNet layer widths (16 key heads, 32 value heads of 128),
    # 4 layers, every one linear attention with a dense MLP: the delta rule's prefill
    "qwen3-next-gdn4": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                        dict(hidden_size=2048, num_hidden_layers=4, vocab_size=151936,
                             layer_types=["linear_attention"] * 4, mlp_only_layers=[0, 1, 2, 3],
                             intermediate_size=5120, num_attention_heads=16,
                             num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                             linear_num_value_heads=32, linear_key_head_dim=128,
                             linear_value_head_dim=128, linear_conv_kernel_dim=4,
                             tie_word_embeddings=False)),
}


def make(args):
    cfg_name, cls_name, kw = PRESETS[args.preset]
    torch.manual_seed(args.seed)
    config = getattr(transformers, cfg_name)(**kw)
    model = getattr(transformers, cls_name)(config).eval()
    model.save_pretrained(args.dir)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"preset": args.preset, "params": n, "dir": args.dir}))


def bench(args):
    dtype = getattr(torch, args.dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.dir, dtype=dtype).cuda().eval()
    try:
        import mamba_ssm  # noqa: F401
        path = "mamba_ssm kernels"
    except ImportError:
        path = "reference PyTorch path (no mamba_ssm)"
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=g).cuda()
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model.generate(prompt, max_new_tokens=args.n, min_new_tokens=args.n, **kw)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        # prefill alone: one forward over the prompt
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        long_prompt = torch.randint(0, model.config.vocab_size, (1, 256), generator=g).cuda()
        model(long_prompt)
        start.record()
        model(long_prompt)
        end.record()
        torch.cuda.synchronize()
        prefill_s = start.elapsed_time(end) / 1e3
    t = sorted(times)[len(times) // 2]
    print(json.dumps({"impl": "transformers " + transformers.__version__, "path": path,
                      "dtype": args.dtype, "gpu": torch.cuda.get_device_name(),
                      "new_tokens": args.n, "seconds_median": t,
                      "decode_tokens_per_s": args.n / t,
                      "prefill_tokens_per_s": 256 / prefill_s}))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--preset", choices=sorted(PRESETS), default="mamba-130m")
    m.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("bench")
    b.add_argument("dir")
    b.add_argument("-n", type=int, default=128)
    b.add_argument("--prompt", type=int, default=16)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    make(args) if args.cmd == "make" else bench(args)


if __name__ == "__main__":
    main()
