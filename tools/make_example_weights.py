#!/usr/bin/env python3
"""Writes a small random checkpoint for models/examples/rglru.yaml (pure
Python: struct and random, no numpy), so the made-up variant can run.

  python3 tools/make_example_weights.py models/examples/rglru_tiny
"""
import json
import os
import random
import struct
import sys

CFG = dict(model_type="rglru_example", vocab_size=300, hidden_size=32, intermediate_size=48,
           conv_kernel=4, num_hidden_layers=2, layer_norm_epsilon=1e-5)


def main(out):
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(0)
    H, I, K, V = CFG["hidden_size"], CFG["intermediate_size"], CFG["conv_kernel"], CFG["vocab_size"]
    tensors = {"embed.weight": ([V, H], 0.5), "norm_f.weight": ([H], None)}
    for i in range(CFG["num_hidden_layers"]):
        p = "layers.%d." % i
        tensors.update({p + "norm.weight": ([H], None), p + "in_proj.weight": ([2 * I, H], H ** -0.5),
                        p + "conv1d.weight": ([I, 1, K], 0.5), p + "conv1d.bias": ([I], 0.1),
                        p + "recurrence_gate.weight": ([I, I], I ** -0.5),
                        p + "input_gate.weight": ([I, I], I ** -0.5), p + "a_param": ([I], 1.0),
                        p + "out_proj.weight": ([H, I], I ** -0.5)})
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        shape, scale = tensors[name]
        n = 1
        for d in shape:
            n *= d
        vals = [1 + 0.1 * rnd.gauss(0, 1) if scale is None else scale * rnd.gauss(0, 1)
                for _ in range(n)]
        data = struct.pack("<%df" % n, *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CFG, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
