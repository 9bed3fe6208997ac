#!/usr/bin/env python3
"""Writes a random Mamba-1 checkpoint (f32, models/pymamba's config at another
width and depth) for timing the backends on models of other sizes (pure
Python: struct, array and random, no numpy; the weights repeat one random
block, which is fine for timing and for nothing else).

  python3 tools/make_random_mamba.py OUT HIDDEN LAYERS [VOCAB]
"""
import json, os, random, struct, sys
from array import array
out, H, L = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
V = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
I, N, K, R = 2 * H, 16, 4, max(1, (H + 15) // 16)
rnd = random.Random(0)
base = array('f', [rnd.gauss(0, 1) for _ in range(65537)])
def vals(n, scale, const=None):
    if const is not None: return array('f', [const]) * n
    a = array('f', base) * (n // len(base) + 1)
    del a[n:]
    return array('f', [x * scale for x in a]) if scale != 1 else a
T = {"backbone.embeddings.weight": ([V, H], 0.5, None), "backbone.norm_f.weight": ([H], 0, 1.0)}
for i in range(L):
    p = "backbone.layers.%d." % i
    T.update({p + "norm.weight": ([H], 0, 1.0), p + "mixer.in_proj.weight": ([2 * I, H], H ** -0.5, None),
              p + "mixer.conv1d.weight": ([I, 1, K], 0.5, None), p + "mixer.conv1d.bias": ([I], 0.1, None),
              p + "mixer.x_proj.weight": ([R + 2 * N, I], I ** -0.5, None),
              p + "mixer.dt_proj.weight": ([I, R], R ** -0.5, None), p + "mixer.dt_proj.bias": ([I], 0, -3.0),
              p + "mixer.A_log": ([I, N], 0, 0.5), p + "mixer.D": ([I], 0, 1.0),
              p + "mixer.out_proj.weight": ([H, I], I ** -0.5, None)})
os.makedirs(out, exist_ok=True)
hdr, off, blobs = {}, 0, []
for name in sorted(T):
    shape, scale, c = T[name]
    n = 1
    for d in shape: n *= d
    b = vals(n, scale, c).tobytes()
    hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for b in blobs: f.write(b)
here = os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open(os.path.join(here, "..", "models", "pymamba", "config.json")))
cfg.update(hidden_size=H, intermediate_size=I, num_hidden_layers=L, vocab_size=V, time_step_rank=R, dtype="float32")
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
print("%s: %d parameters" % (out, off // 4))
