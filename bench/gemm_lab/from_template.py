#!/usr/bin/env python3
"""templates/gemm_coop.glsl.in as a gemm_lab kernel: no norm, x f32 and w
bf16 straight from gemm_lab's bindings, the plain epilogue.

    python3 bench/gemm_lab/from_template.py BN SGN AHEAD DB [TEMPLATE] > /tmp/coop.glsl
    build/gemm_lab 512 4096 16384 /tmp/coop.glsl 128 BN

BN 128 (SGN 4) or 64 (SGN 2); AHEAD and DB as codegen/matmul.c sets them.
TEMPLATE (default templates/gemm_coop.glsl.in) may be another version of
it, e.g. one from git (`git show REV:templates/gemm_coop.glsl.in > FILE`).

    python3 bench/gemm_lab/from_template.py gemv MT FN NW PD > /tmp/few.glsl
    build/gemm_lab 16 2048 8192 /tmp/few.glsl 16 16*FN

writes templates/gemv_coop.glsl.in (a batched program's matmul of a few
rows, MT tiles of 16) the same way, with its knobs as codegen/matmul.c's
coop_few sets them; BM is M (every row a workgroup).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BUFFERS = """layout(std430, binding = 0) buffer B0 { float v[]; } b0;
layout(std430, binding = 1) readonly buffer B1 { uvec4 q[]; } b1;
layout(std430, binding = 2) readonly buffer B2 { uvec4 q[]; } b2;
uvec4 ldq1(uint i) { return b1.q[i]; }
uvec4 ldq2(uint i) { return b2.q[i]; }"""
COMMON = """float ssm_x16(float x) {
  uint u = floatBitsToUint(x);
  return uintBitsToFloat((u + 0xfffu + ((u >> 13u) & 1u)) & 0xffffe000u);
}
vec4 ssm_x16v(vec4 x) { return vec4(ssm_x16(x.x), ssm_x16(x.y), ssm_x16(x.z), ssm_x16(x.w)); }"""
LOADS = """void load_x(uint m, uint k, out vec4 a, out vec4 b) {
  uint i = (m * GK + k) >> 2u;
  a = uintBitsToFloat(ldq1(i));
  b = uintBitsToFloat(ldq1(i + 1u));
}
void load_g(uint k, out vec4 a, out vec4 b) { a = vec4(1.0); b = vec4(1.0); }
void load_w(uint n, uint k, out vec4 a, out vec4 b) {
  uvec4 q = ldq2((n * GK + k) >> 3u);
  a = uintBitsToFloat(uvec4(q.x << 16u, q.x & 0xffff0000u, q.y << 16u, q.y & 0xffff0000u));
  b = uintBitsToFloat(uvec4(q.z << 16u, q.z & 0xffff0000u, q.w << 16u, q.w & 0xffff0000u));
}
float epilogue(float v, uint o) { return v; }"""


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "gemv":
        mt, fn, nw, pd = sys.argv[2:6]
        pool = max(int(nw) * (int(mt) + int(fn)) * 48, int(nw) * int(fn) * 64)  # coop_few's POOL
        path = os.path.join(ROOT, "templates", "gemv_coop.glsl.in")
        sub = {"MT": mt, "FN": fn, "NW": nw, "PD": pd, "POOL": str(pool)}
    elif len(sys.argv) in (5, 6):
        bn, sgn, ahead, db = sys.argv[1:5]
        path = sys.argv[5] if len(sys.argv) == 6 else os.path.join(ROOT, "templates", "gemm_coop.glsl.in")
        # without the prep kernel and the split over k, whose scratch gemm_lab does not lay out
        sub = {"BN": bn, "SGN": sgn, "AHEAD": ahead, "DB": db, "LIVE": "GM", "RUN": "", "PREP": "0",
               "SPLIT": "1", "PB": "0", "PROWS": "0", "PCOLS": "0", "COUNTERS": "0"}
    else:
        sys.exit(__doc__)
    t = open(path).read()
    t = "\n".join(l for l in t.split("\n") if not l.startswith("//"))
    t = re.sub(r"#define G[MKN] \{\{[MKN]\}\}u\n", "", t)  # gemm_lab defines them
    t = t.replace("{{KP}}u", "GK")  # one part: all of k
    sub.update({"NORM": "0", "EPS": "0", "BUFFERS": BUFFERS, "COMMON": COMMON, "LOADS": LOADS})
    sys.stdout.write(re.sub(r"\{\{(\w+)\}\}", lambda m: sub[m.group(1)], t))


if __name__ == "__main__":
    main()
