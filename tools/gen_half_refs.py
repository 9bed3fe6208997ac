#!/usr/bin/env python3
"""16-bit references for existing golden fixtures.

    python3 tools/gen_half_refs.py tests/data [NAME ...] [--dtypes bf16,f16]

For each fixture folder (tests/data/NAME with golden.json; every one when no
NAME is given) it loads the saved model in float32 on the CPU, recomputes
transformers' logits over the fixture's tokens (prompt + generated[:-1]),
checks that they are the committed logits.f32 (so the references below are
of the same model), and writes, for each dtype h:
  logits_<h>w.f32  transformers in float32 with the Linear and Embedding weights
                   rounded to h: the numbers a 16-bit bundle keeps;
  logits_<h>.f32   transformers run entirely in h (activations too);
and records both files and their largest distance from logits.f32 under
golden.json's "half" (as tools/gen_golden.py does for the fixtures it makes
with 16-bit references). The native distance D is the scale of the bound a
16-bit bundle is held to (tests/test_golden.c). Runs where transformers does:
the GPU machine's Python, on its CPU, one thread, no TF32.
"""
import copy
import json
import os
import sys

import torch
import transformers

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].float()


def write_rows(path, t):
    with open(path, "wb") as f:
        f.write(t.contiguous().numpy().astype("<f4").tobytes())


def one(d, dtypes):
    with open(os.path.join(d, "golden.json")) as f:
        g = json.load(f)
    ids = list(g["prompt"]) + list(g["generated"][:-1])
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ref = torch.frombuffer(bytearray(open(os.path.join(d, "logits.f32"), "rb").read()),
                           dtype=torch.float32).reshape(len(ids), -1)
    full = logits_of(model, ids)
    again = float((full - ref).abs().max())
    if again > 1e-5 * float(ref.abs().max()):
        raise SystemExit("%s: the saved model gives other logits than logits.f32 (%.3g)" % (d, again))
    half = g.get("half", {})
    for h in dtypes:
        rounded = copy.deepcopy(model).eval()
        with torch.no_grad():
            for mod in rounded.modules():
                if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                    mod.weight.copy_(mod.weight.to(DTYPES[h]).to(torch.float32))
        lw = logits_of(rounded, ids)
        ln = logits_of(copy.deepcopy(model).to(DTYPES[h]).eval(), ids)
        write_rows(os.path.join(d, "logits_%sw.f32" % h), lw)
        write_rows(os.path.join(d, "logits_%s.f32" % h), ln)
        half[h] = {
            "weights_rounded_file": "logits_%sw.f32" % h,
            "weights_rounded_max_abs_diff_vs_f32": float((lw - ref).abs().max()),
            "native_file": "logits_%s.f32" % h,
            "native_max_abs_diff_vs_f32": float((ln - ref).abs().max()),
        }
        print("%s %s: rounded weights %.3g, native %.3g (max |logit| %.3g)" % (
            os.path.basename(d), h, half[h]["weights_rounded_max_abs_diff_vs_f32"],
            half[h]["native_max_abs_diff_vs_f32"], float(ref.abs().max())), flush=True)
    g["half"] = half
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--dtypes")]
    dtypes = ["bf16"]
    for a in sys.argv[1:]:
        if a.startswith("--dtypes="):
            dtypes = a.split("=", 1)[1].split(",")
    if not args or any(h not in DTYPES for h in dtypes):
        print(__doc__)
        sys.exit(2)
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    root, names = args[0], args[1:]
    if not names:
        names = sorted(n for n in os.listdir(root)
                       if os.path.exists(os.path.join(root, n, "golden.json")))
    for n in names:
        one(os.path.join(root, n), dtypes)


if __name__ == "__main__":
    main()
