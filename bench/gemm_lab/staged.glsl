#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
// gemm_lab's GEMM of x prepared by prep.glsl (f16 rows with a scale a row)
// and w bf16, converted as it is staged: tiles of 128 x BN, NW subgroups in
// (NW / SGN) x SGN, slices of BK values of k in two buffers of shared
// memory (one barrier a slice), 1/s of each row in the epilogue. Knobs
// (gemm_lab's NAME=VALUE arguments): BN, SGN, BK, NW; ORDER 0 (products
// straight into the accumulators), 1 (a chain from zero a slice, added) or
// 2 (every tile of w loaded first, k outermost); XDIRECT 1 (x's tiles
// loaded from memory by each subgroup, not staged); EPI 1 (the epilogue
// reads whole vectors of 4 floats), 0 (an element picked by a variable
// index) or 2 (tiles stored straight to memory, then scaled in place: a
// timing form, wrong where N is not a multiple of 16); NOMMA 1 (with ORDER 1: no products, to time the rest).
#ifndef EPI
#define EPI 1
#endif
#ifndef BN
#define BN 128u
#endif
#ifndef SGN
#define SGN 4
#endif
#ifndef BK
#define BK 32u
#endif
#ifndef NW
#define NW 16
#endif
#ifndef XDIRECT
#define XDIRECT 0
#endif
#define BM 128u
#define KK (BK / 16u)
#define RS (BK / 8u + 1u)
#define NT (NW * 32u)
#define FM (8 / (NW / SGN))
#define FN (int(BN) / 16 / SGN)
#define XV (BM * BK / 8u / NT) /* vectors of 8 a thread stages, x */
#define WV (BN * BK / 8u / NT) /* and w */
#define PLANE (XDIRECT != 0 ? 0u : BM * RS)
#define BUF (PLANE + BN * RS)
layout(local_size_x = NT) in;
layout(std430, binding = 0) buffer B0 { float v[]; } b0;
layout(std430, binding = 2) readonly buffer B2 { uvec4 q[]; } b2;
layout(std430, binding = 3) readonly buffer B3 { uvec4 q[]; } b3;
layout(std430, binding = 3) readonly buffer B3f { float f[]; } b3f;
#define TILE fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
shared uvec4 pool[2u * BUF > 64u * NW ? 2u * BUF : 64u * NW];
uvec4 pack8(vec4 a, vec4 b) {
  return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}
uvec4 bf2h(uvec4 q) {
  vec4 a = uintBitsToFloat(uvec4(q.x << 16u, q.x & 0xffff0000u, q.y << 16u, q.y & 0xffff0000u));
  vec4 b = uintBitsToFloat(uvec4(q.z << 16u, q.z & 0xffff0000u, q.w << 16u, q.w & 0xffff0000u));
  return pack8(a, b);
}
void main() {
  uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, t = sg * 32u + lane;
  uint tm = (GM + BM - 1u) / BM, tn = (GN + BN - 1u) / BN;
  uint id = gl_WorkGroupID.x;
  if (id >= tm * tn) return;
  uint m0 = (id % tm) * BM, n0 = (id / tm) * BN;
  /* vector v of a plane of R rows: row (t + v NT) / (BK/8), column (t + v NT) % (BK/8) */
#if XDIRECT == 0
  uvec4 xr[XV];
#endif
  uvec4 wr[WV];
  #define VROW(v) ((t + (v) * NT) / (BK / 8u))
  #define VCOL(v) ((t + (v) * NT) % (BK / 8u))
#if XDIRECT == 0
  #define LOADX(k0) [[unroll]] for (uint v = 0u; v < XV; v++) \
    xr[v] = b3.q[(min(m0 + VROW(v), GM - 1u) * GK + (k0)) / 8u + VCOL(v)];
  #define STOREX(buf) [[unroll]] for (uint v = 0u; v < XV; v++) \
    pool[(buf) * BUF + VROW(v) * RS + VCOL(v)] = m0 + VROW(v) < GM ? xr[v] : uvec4(0u);
#else
  #define LOADX(k0)
  #define STOREX(buf)
#endif
  #define LOAD(k0) LOADX(k0) [[unroll]] for (uint v = 0u; v < WV; v++) \
    wr[v] = b2.q[(min(n0 + VROW(v), GN - 1u) * GK + (k0)) / 8u + VCOL(v)];
  #define STORE(buf) STOREX(buf) [[unroll]] for (uint v = 0u; v < WV; v++) \
    pool[(buf) * BUF + PLANE + VROW(v) * RS + VCOL(v)] = n0 + VROW(v) < GN ? bf2h(wr[v]) : uvec4(0u);
  uint wm = (sg / uint(SGN)) * uint(FM) * 16u, wn = (sg % uint(SGN)) * uint(FN) * 16u;
  ACC acc[FM][FN];
  [[unroll]] for (int i = 0; i < FM; i++)
    [[unroll]] for (int j = 0; j < FN; j++) acc[i][j] = ACC(0.0);
  LOAD(0u)
  STORE(0u)
  if (BK < GK) { LOAD(BK) }
  barrier();
  uint it = 0u;
  [[dont_unroll]] for (uint k0 = 0u; k0 < GK; k0 += BK, it++) {
    uint cur = it & 1u, base = cur * BUF, kk0 = k0;
    TILE a[FM][KK];
    [[unroll]] for (int i = 0; i < FM; i++) {
      uint r0 = wm + uint(i) * 16u;
      [[unroll]] for (uint kk = 0u; kk < KK; kk++)
#if XDIRECT == 0
        coopMatLoadNV(a[i][kk], pool, base + r0 * RS + kk * 2u, RS, false);
#else
        coopMatLoadNV(a[i][kk], b3.q, (min(m0 + r0, GM - 16u) * GK + k0 + kk * 16u) / 8u, GK / 8u, false);
#endif
    }
#ifndef ORDER
#define ORDER 0
#endif
#if ORDER == 2 /* all of w's tiles loaded, then the products, k outermost */
    TILE b[FN][KK];
    [[unroll]] for (int j = 0; j < FN; j++)
      [[unroll]] for (uint kk = 0u; kk < KK; kk++)
        coopMatLoadNV(b[j][kk], pool, base + PLANE + (wn + uint(j) * 16u) * RS + kk * 2u, RS, true);
    [[unroll]] for (uint kk = 0u; kk < KK; kk++)
      [[unroll]] for (int j = 0; j < FN; j++)
        [[unroll]] for (int i = 0; i < FM; i++) acc[i][j] = coopMatMulAddNV(a[i][kk], b[j][kk], acc[i][j]);
#else
    [[unroll]] for (int j = 0; j < FN; j++) {
      TILE b[KK];
      [[unroll]] for (uint kk = 0u; kk < KK; kk++)
        coopMatLoadNV(b[kk], pool, base + PLANE + (wn + uint(j) * 16u) * RS + kk * 2u, RS, true);
#if ORDER == 1 /* a chain from zero a slice, added to the accumulator */
      [[unroll]] for (int i = 0; i < FM; i++) {
        ACC part = ACC(0.0);
#ifndef NOMMA
        [[unroll]] for (uint kk = 0u; kk < KK; kk++) part = coopMatMulAddNV(a[i][kk], b[kk], part);
#else
        part = part + ACC(float(kk0 + i));
#endif
        acc[i][j] += part;
      }
#else
      [[unroll]] for (int i = 0; i < FM; i++)
        [[unroll]] for (uint kk = 0u; kk < KK; kk++) acc[i][j] = coopMatMulAddNV(a[i][kk], b[kk], acc[i][j]);
#endif
    }
#endif
    if (k0 + BK < GK) {
      STORE(cur ^ 1u)
      if (k0 + 2u * BK < GK) { LOAD(k0 + 2u * BK) }
    }
    barrier();
  }
#if EPI == 2
  [[unroll]] for (int i = 0; i < FM; i++)
    [[unroll]] for (int j = 0; j < FN; j++)
      coopMatStoreNV(acc[i][j], b0.v, (m0 + wm + uint(i) * 16u) * GN + n0 + wn + uint(j) * 16u, GN, false);
  subgroupMemoryBarrierBuffer();
  subgroupBarrier();
  [[unroll]] for (int i = 0; i < FM; i++)
    [[unroll]] for (int j = 0; j < FN; j++)
      [[unroll]] for (uint h = 0u; h < 8u; h++) {
        uint e = lane + h * 32u, m = m0 + wm + uint(i) * 16u + e / 16u, n = n0 + wn + uint(j) * 16u + e % 16u;
        if (m < GM && n < GN) b0.v[m * GN + n] *= b3f.f[GM * GK / 2u + m];
      }
  if (true) return;
#endif
  [[unroll]] for (int i = 0; i < FM; i++)
    [[unroll]] for (int j = 0; j < FN; j++) {
      coopMatStoreNV(acc[i][j], pool, sg * 64u, 4u, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
#if EPI
      [[unroll]] for (uint h = 0u; h < 2u; h++) {
        uint q = lane + h * 32u, r = wm + uint(i) * 16u + q / 4u, m = m0 + r;
        uint n = n0 + wn + uint(j) * 16u + (q % 4u) * 4u;
        vec4 v = uintBitsToFloat(pool[sg * 64u + q]);
        if (m < GM) {
          float sc = b3f.f[GM * GK / 2u + m];
          [[unroll]] for (uint c = 0u; c < 4u; c++)
            if (n + c < GN) b0.v[m * GN + n + c] = v[c] * sc;
        }
      }
#else
      for (uint e = lane; e < 256u; e += 32u) {
        uint r = wm + uint(i) * 16u + e / 16u, m = m0 + r, n = n0 + wn + uint(j) * 16u + e % 16u;
        if (m < GM && n < GN)
          b0.v[m * GN + n] = uintBitsToFloat(pool[sg * 64u + e / 4u][e % 4u]) * b3f.f[GM * GK / 2u + m];
      }
#endif
      subgroupBarrier();
    }
}
