#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
// few: templates/gemm_few.glsl.in standalone (the lab's bindings, no
// epilogue): a batched program's matmul of a few rows (16 MT) on the matrix
// units, with x made ready first by prep.glsl (f16 rows, each scaled by a
// power of two, and the row's factor, in the scratch at binding 3):
// out[m,n] = f[m] * sum_k xh[m,k] w[n,k]. A workgroup takes CG groups of FN
// tiles of 16 columns, and KS subgroups split k for each group (steps of 16
// values: kp, kp + KS, ...). A subgroup reads its x tiles straight from the
// scratch with coopMatLoad and stages only its w, bf16 to f16, in its own
// shared memory, PD steps of it in flight in registers; no scale per step:
// the row's factor is applied once, after the subgroups' k-sums meet in
// shared memory. Against templates/gemv_coop.glsl.in (from_template.py
// gemv), which scales x per step and subgroup: docs/performance.md.
//   build/gemm_lab 64 2048 8192 bench/gemm_lab/few.glsl 64 64 bench/gemm_lab/prep.glsl \
//     MT=4 FN=2 CG=2 KS=4 PD=2
// BM is M, BN is 16 FN CG. M a multiple of 16 (the scratch has M rows);
// shared memory: 1,792 NW FN bytes (NW = CG KS subgroups), within the
// device's (48 KiB on the H200).
// knobs: MT, FN, CG, KS, PD
#define NW (CG * KS)
#define RS 3u
#define STEPS (GK / 16u)
layout(local_size_x = NW * 32) in;
layout(std430, binding = 0) buffer B0 { float v[]; } b0;
layout(std430, binding = 2) readonly buffer B2 { uvec4 q[]; } b2;
layout(std430, binding = 3) readonly buffer B3 { uvec4 q[]; } b3;
layout(std430, binding = 3) readonly buffer B3f { float f[]; } b3f;
#define TILE fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
shared uvec4 stage[NW * FN * 16 * 3];
shared float red[NW * FN * 256];
uint h2(uint u) { return packHalf2x16(vec2(uintBitsToFloat(u << 16u), uintBitsToFloat(u & 0xffff0000u))); }
void main() {
  uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, t = sg * 32u + lane;
  uint id = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint cg = sg / uint(KS), kp = sg % uint(KS);
  uint nw0 = id * uint(CG * FN * 16), n0 = nw0 + cg * uint(FN * 16);
  uint r = lane / 2u, kh = (lane % 2u) * 8u, base = sg * uint(FN * 16 * 3), at = r * RS + kh / 8u;
  uvec4 wq[PD][FN];
  [[unroll]] for (int u = 0; u < PD; u++) {
    uint s = kp + uint(u * KS);
    [[unroll]] for (int j = 0; j < FN; j++)
      wq[u][j] = s < STEPS ? b2.q[(min(n0 + uint(j) * 16u + r, GN - 1u) * GK + s * 16u + kh) / 8u] : uvec4(0u);
  }
  ACC acc[MT][FN];
  [[unroll]] for (int i = 0; i < MT; i++)
    [[unroll]] for (int j = 0; j < FN; j++) acc[i][j] = ACC(0.0);
  for (uint s1 = kp; s1 < STEPS; s1 += uint(PD * KS)) {
    [[unroll]] for (int u = 0; u < PD; u++) {
      uint s = s1 + uint(u * KS);
      if (s >= STEPS) break;
      [[unroll]] for (int j = 0; j < FN; j++) {
        uvec4 q = wq[u][j];
        stage[base + uint(j) * 16u * RS + at] = uvec4(h2(q.x), h2(q.y), h2(q.z), h2(q.w));
      }
      uint sn = s + uint(PD * KS);
      [[unroll]] for (int j = 0; j < FN; j++)
        if (sn < STEPS) wq[u][j] = b2.q[(min(n0 + uint(j) * 16u + r, GN - 1u) * GK + sn * 16u + kh) / 8u];
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      TILE a[MT];
      [[unroll]] for (int i = 0; i < MT; i++)
        coopMatLoadNV(a[i], b3.q, (uint(i) * 16u * GK + s * 16u) / 8u, GK / 8u, false);
      [[unroll]] for (int j = 0; j < FN; j++) {
        TILE b;
        coopMatLoadNV(b, stage, base + uint(j) * 16u * RS, RS, true);
        [[unroll]] for (int i = 0; i < MT; i++) acc[i][j] = coopMatMulAddNV(a[i], b, acc[i][j]);
      }
      subgroupBarrier();
    }
  }
  [[unroll]] for (int i = 0; i < MT; i++) {
    [[unroll]] for (int j = 0; j < FN; j++)
      coopMatStoreNV(acc[i][j], red, (sg * uint(FN) + uint(j)) * 256u, 16u, false);
    barrier();
    for (uint e = t; e < uint(CG * FN) * 256u; e += uint(NW) * 32u) {
      uint g = e / uint(FN * 256), jj = (e / 256u) % uint(FN), rr = (e % 256u) / 16u;
      uint m = uint(i) * 16u + rr, n = nw0 + g * uint(FN * 16) + jj * 16u + e % 16u;
      if (m >= GM || n >= GN) continue;
      float v = 0.0;
      for (uint p = 0u; p < uint(KS); p++) v += red[((g * uint(KS) + p) * uint(FN) + jj) * 256u + e % 256u];
      b0.v[m * GN + n] = v * b3f.f[GM * GK / 2u + m];
    }
    barrier();
  }
}
