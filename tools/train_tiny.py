#!/usr/bin/env python3
"""Trains the small Mamba that ships with ssmc (models/pymamba/).

Data recipe: every .py file of the Python standard library that runs this
script (sysconfig's stdlib dir, no site-packages, no test/ or idlelib/),
read as UTF-8, sorted by path. A file is held out when crc32(relative path)
% 20 == 0; the rest is training data. Documents are joined with
<|endoftext|>.

Tokenizer: byte-level BPE (tokenizers library), vocabulary 4096 including
<|endoftext|>, trained on the training files.
Model: transformers MambaForCausalLM (hidden 256, 8 layers, state 16, expand
2, conv 4), trained from seed 0 with AdamW (lr 3e-3 warmup+cosine, batch
64 x 256 tokens, bf16 autocast matmuls). Training runs a functional forward
over the model's own parameters with a chunked parallel scan (transformers'
reference path loops over tokens in Python, ~25x slower); the script checks
it against transformers' forward before training. The saved model is then
evaluated by transformers itself. Saved in bf16 with tokenizer.json.

It records, in heldout.json: the held-out loss over all held-out files, and
for one held-out file (heldout.py, copied next to the model) the token ids
and transformers' mean per-token log-likelihood computed in float32 from the
saved bf16 weights, which tests/test_pymamba.c compares with ssmc's.

  python3 tools/train_tiny.py OUT_DIR [--steps 2500] [--max-seconds S]
"""
import argparse
import json
import math
import os
import random
import sys
import sysconfig
import time
import zlib

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOT = "<|endoftext|>"


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        parts = rel.split(os.sep)
        if any(p in ("test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__",
                     "lib2to3", "turtledemo") for p in parts):
            dirs[:] = []
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                try:
                    text = open(path, encoding="utf-8").read()
                except (UnicodeDecodeError, OSError):
                    continue
                out.append((os.path.relpath(path, root), text))
    out.sort()
    return out


def fast_forward(model, ids, chunk=16):
    """MambaForCausalLM's math with a chunked parallel scan (training only)."""
    bb = model.backbone
    x = bb.embeddings(ids)
    for layer in bb.layers:
        m = layer.mixer
        h = layer.norm(x)
        xz = m.in_proj(h).transpose(1, 2)
        u, z = xz.chunk(2, dim=1)
        L = u.size(-1)
        u = torch.nn.functional.silu(m.conv1d(u)[..., :L]).transpose(1, 2)  # [B,L,D]
        dbc = m.x_proj(u)
        dt, Bm, Cm = torch.split(dbc, [m.time_step_rank, m.ssm_state_size, m.ssm_state_size], -1)
        dt = torch.nn.functional.softplus(m.dt_proj(dt)).float()            # [B,L,D]
        A = -torch.exp(m.A_log.float())                                      # [D,N]
        uf = u.float()
        dA = dt[..., None] * A                                               # [B,L,D,N]
        bx = dt[..., None] * Bm.float()[:, :, None, :] * uf[..., None]
        Bsz, _, D, N = dA.shape
        dA = dA.view(Bsz, L // chunk, chunk, D, N)
        bx = bx.view(Bsz, L // chunk, chunk, D, N)
        cum = torch.cumsum(dA, 2).clamp(min=-60.0)
        P = torch.exp(cum)
        local = P * torch.cumsum(bx / P, 2)
        hs, carry = [], torch.zeros(Bsz, D, N, device=ids.device)
        for c in range(L // chunk):
            hc = local[:, c] + P[:, c] * carry[:, None]
            hs.append(hc)
            carry = hc[:, -1]
        hstate = torch.stack(hs, 1).view(Bsz, L, D, N)
        y = (hstate * Cm.float()[:, :, None, :]).sum(-1) + uf * m.D.float()
        y = (y * torch.nn.functional.silu(z.transpose(1, 2).float())).to(u.dtype)
        x = x + m.out_proj(y)
    return model.lm_head(bb.norm_f(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--max-seconds", type=float, default=1e9,
                    help="stop training early (the schedule still assumes --steps)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    random.seed(0)

    files = stdlib_files()
    held = [(p, t) for p, t in files if zlib.crc32(p.encode()) % 20 == 0]
    train = [(p, t) for p, t in files if zlib.crc32(p.encode()) % 20 != 0]
    print(f"python {sys.version.split()[0]}: {len(files)} files, {len(train)} train, "
          f"{len(held)} held out", flush=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((t for _, t in train), trainer)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    eot = tok.token_to_id(EOT)

    def encode(docs):
        ids = []
        for _, t in docs:
            ids.extend(tok.encode(t).ids)
            ids.append(eot)
        return torch.tensor(ids, dtype=torch.long)

    train_ids, held_ids = encode(train), encode(held)
    print(f"tokens: train {train_ids.numel()}, held out {held_ids.numel()}", flush=True)

    config = transformers.MambaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256,
                                      num_hidden_layers=8, state_size=16, expand=2,
                                      conv_kernel=4, bos_token_id=eot,
                                      eos_token_id=eot, pad_token_id=eot,
                                      tie_word_embeddings=True)
    model = transformers.MambaForCausalLM(config).cuda()
    nparams = sum(p.numel() for p in model.parameters())
    print(f"params {nparams}", flush=True)
    with torch.no_grad():  # the training forward computes transformers' function
        probe = train_ids[:args.seq][None].cuda()
        ref, mine = model(probe).logits.float(), fast_forward(model, probe).float()
        print(f"fast forward vs transformers: max |diff| {(ref - mine).abs().max().item():.3g} "
              f"(max |logit| {ref.abs().max().item():.3g})", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warm = 100

    def lr_at(step):
        if step < warm:
            return (step + 1) / warm
        p = (step - warm) / max(1, args.steps - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    g = torch.Generator().manual_seed(0)
    data = train_ids.cuda()
    t0 = time.time()
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, data.numel() - args.seq - 1, (args.batch,), generator=g).cuda()
        idx = starts[:, None] + torch.arange(args.seq + 1, device="cuda")[None, :]
        batch = data[idx]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fast_forward(model, batch[:, :-1]).float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
        if time.time() - t0 > args.max_seconds:
            print(f"stopped at step {step} after {args.max_seconds} s", flush=True)
            args.steps = step + 1
            break

    # Save in bf16; evaluate the saved weights in float32 (what ssmc computes).
    model.to(torch.bfloat16).save_pretrained(args.out)
    for f in os.listdir(args.out):
        if f not in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
            os.remove(os.path.join(args.out, f))
    m = transformers.MambaForCausalLM.from_pretrained(args.out, dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        losses = []
        for i in range(0, held_ids.numel() - 1, 1024):
            chunk = held_ids[i:i + 1025].cuda()[None]
            if chunk.size(1) < 2:
                break
            lg = m(chunk[:, :-1]).logits.float()
            losses.append(torch.nn.functional.cross_entropy(
                lg[0], chunk[0, 1:], reduction="sum").item())
        heldout_loss = sum(losses) / (held_ids.numel() - 1)
        # one held-out file for the C test: the smallest held-out file over 2 KB
        name, text = min(((p, t) for p, t in held if len(t) > 2000), key=lambda x: len(x[1]))
        ids = tok.encode(text).ids
        x = torch.tensor([ids], device="cuda")
        lg = m(x).logits.float()[0]
        ll = torch.log_softmax(lg[:-1].double(), -1).gather(1, x[0, 1:, None]).mean().item()
        prompt = tok.encode("def fibonacci(n):").ids
        gen = m.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=60,
                         do_sample=False, eos_token_id=None, pad_token_id=eot)
        sample = tok.decode(gen[0].tolist())
    open(os.path.join(args.out, "heldout.py"), "w", encoding="utf-8").write(text)
    record = {"python": sys.version.split()[0], "transformers_version": transformers.__version__,
              "torch_version": torch.__version__, "seed": 0, "steps": args.steps,
              "params": nparams, "train_tokens": train_ids.numel(),
              "heldout_tokens": held_ids.numel(), "heldout_loss": heldout_loss,
              "heldout_file": name, "heldout_file_ids": ids,
              "heldout_file_mean_loglik": ll, "greedy_sample": sample}
    json.dump(record, open(os.path.join(args.out, "heldout.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in record.items() if k != "heldout_file_ids"}, indent=1))


if __name__ == "__main__":
    main()
