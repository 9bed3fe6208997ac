#!/usr/bin/env python3
"""Greedy generation with a repetition penalty, from Hugging Face transformers.

Usage:
    python3 tools/gen_penalty_golden.py [FIXTURE_DIR ...]
        (default: tests/data/mamba1_tiny tests/data/mamba2_tiny tests/data/jamba_tiny)

For each fixture (made by tools/gen_golden.py: config.json, model.safetensors and
golden.json's prompt), runs transformers' greedy `generate` on the CPU in float32
with `repetition_penalty` = each of PENALTIES and writes FIXTURE_DIR/penalty.json:

    {"prompt": [...], "runs": [{"repetition_penalty": P, "generated": [...],
      "min_top2_margin": M}, ...]}

transformers' RepetitionPenaltyLogitsProcessor divides a positive logit of every
token already in the sequence (prompt and generated) by P and multiplies a negative
one by P, before the greedy choice. min_top2_margin is the smallest gap between the
best and second-best processed score over the generated steps: a run whose margin is
under MIN_MARGIN is not written (a tie our f32 sums could break the other way).

Needs torch and transformers 5.x (the fixtures were made with 5.17.0).
"""

import json
import os
import sys

import torch
import transformers

PENALTIES = (1.3, 2.0, 0.8)
NEW_TOKENS = 16
MIN_MARGIN = 0.02


def run(fixture):
    golden = json.load(open(os.path.join(fixture, "golden.json")))
    model = transformers.AutoModelForCausalLM.from_pretrained(fixture, torch_dtype=torch.float32)
    model.eval()
    prompt = golden["prompt"]
    ids = torch.tensor([prompt])
    runs = []
    for p in PENALTIES:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 repetition_penalty=p, max_new_tokens=NEW_TOKENS,
                                 min_new_tokens=NEW_TOKENS, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=0)
        gen = out.sequences[0, len(prompt):].tolist()
        margin = min(float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores)
        print(f"{fixture}: penalty {p}: {gen} (margin {margin:.4f})")
        if margin < MIN_MARGIN:
            print(f"{fixture}: penalty {p}: margin under {MIN_MARGIN}, not written")
            continue
        runs.append({"repetition_penalty": p, "generated": gen, "min_top2_margin": margin})
    doc = {"model_class": type(model).__name__, "transformers_version": transformers.__version__,
           "torch_version": torch.__version__, "prompt": prompt, "runs": runs}
    with open(os.path.join(fixture, "penalty.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    fixtures = sys.argv[1:] or ["tests/data/mamba1_tiny", "tests/data/mamba2_tiny",
                                "tests/data/jamba_tiny"]
    for f in fixtures:
        run(f)


if __name__ == "__main__":
    main()
