/*
 * glsl_windows.c — GLSL's storage bindings: one per tensor, read through
 * ld<i>(word), and the same with a large tensor bound as several windows
 * (ssm_cg_glsl_split), for devices whose storage buffers are smaller than
 * the tensor.
 */
#include <string.h>

#include "codegen/internal.h"

/* A quantized tensor's reads (ir.h: ssm_qlayout): qs<i>(j), the scale of
 * block j (of all the tensor's blocks, row by row), q_<i>(e), element e's
 * value (q * d, exact: ssm_qvalue), and qx8_<i>(e, j, a, b), the 8 values
 * from e, a multiple of 8 in a row of a multiple of 8, which lie in block
 * j. */
static void quant_loads(ssm_sb *b, int i, const ssm_type *t) {
  ssm_qlayout l = ssm_qlayout_of(t);
  ssm_sb_printf(b,
                "float qs%d(uint j) {\n"
                "  return unpackHalf2x16(ld%d(%lluu + (j >> 1u)) >> ((j & 1u) << 4u)).x;\n}\n"
                "float q_%d(uint e) {\n"
                "  uint r = e / %lldu;\n"
                "  float d = qs%d(r * %lldu + (e - r * %lldu) / 32u);\n",
                i, i, (unsigned long long)(l.scales / 4), i, (long long)l.k, i, (long long)l.blocks,
                (long long)l.k);
  if (t->dtype == SSM_Q4_0)
    ssm_sb_printf(b,
                  "  return float(int((ld%d(e >> 3u) >> ((e & 7u) << 2u)) & 15u) - 8) * d;\n}\n"
                  "void qx8_%d(uint e, uint j, out vec4 a, out vec4 b) {\n"
                  "  float d = qs%d(j);\n"
                  "  uint w = ld%d(e >> 3u);\n"
                  "  a = vec4(ivec4(uvec4(w, w >> 4u, w >> 8u, w >> 12u) & 15u) - 8) * d;\n"
                  "  b = vec4(ivec4(uvec4(w >> 16u, w >> 20u, w >> 24u, w >> 28u) & 15u) - 8) * d;\n}\n",
                  i, i, i, i);
  else
    ssm_sb_printf(b,
                  "  return float(bitfieldExtract(int(ld%d(e >> 2u)), int((e & 3u) << 3u), 8)) * d;\n}\n"
                  "void qx8_%d(uint e, uint j, out vec4 a, out vec4 b) {\n"
                  "  float d = qs%d(j);\n"
                  "  ivec2 w = ivec2(ld%d(e >> 2u), ld%d((e >> 2u) + 1u));\n"
                  "  a = vec4(bitfieldExtract(w.x, 0, 8), bitfieldExtract(w.x, 8, 8), bitfieldExtract(w.x, 16, 8), bitfieldExtract(w.x, 24, 8)) * d;\n"
                  "  b = vec4(bitfieldExtract(w.y, 0, 8), bitfieldExtract(w.y, 8, 8), bitfieldExtract(w.y, 16, 8), bitfieldExtract(w.y, 24, 8)) * d;\n}\n",
                  i, i, i, i, i);
}

/* GLSL: one storage buffer per tensor, read through ld<i>(word) (and
 * ldq<i>(uvec4 index) for bit i of `vec4`). With `windows` (ssm_cg_glsl_split)
 * a tensor of windows[i] > 1 is bound as that many windows of SSM_WIN words,
 * a specialization constant: the first at binding i, the others after the
 * kernel's n bindings in order, and ld<i> picks the window by index. */
void ssm_cg_glsl_buffers(ssm_sb *b, int n, const ssm_value *const *bind, unsigned vec4,
                         const int *windows, uint64_t window) {
  int extra = n, split = 0;
  char quant_after[SSM_BUNDLE_MAX_BINDINGS] = {0};
  SSM_ASSERT(n <= SSM_BUNDLE_MAX_BINDINGS);
  for (int i = 0; i < n && windows; i++) split |= windows[i] > 1;
  if (split)
    ssm_sb_printf(b, "layout(constant_id = %d) const uint SSM_WIN = %lluu; // words of a window\n",
                  SSM_BUNDLE_GLSL_WINDOW_ID, (unsigned long long)(window / 4));
  for (int i = 0; i < n; i++) {
    const ssm_value *v = bind[i];
    int state = v->def->op == SSM_OP_STATE, nw = windows ? windows[i] : 1, q = vec4 >> i & 1;
    const char *t = v->type.dtype == SSM_I32 ? "int" : v->type.dtype == SSM_F32 ? "float" : "uint";
    for (int w = 0; w < nw; w++) {
      int at = w ? extra++ : i;
      char name[32];
      if (w) snprintf(name, sizeof name, "b%dw%d", i, w);
      else snprintf(name, sizeof name, "b%d", i);
      ssm_sb_printf(b, "layout(std430, binding = %d) %sbuffer B%s { %s v[]; } %s;\n", at,
                    i == 0 ? "writeonly " : state ? "" : "readonly ", name + 1, t, name);
      if (q)
        ssm_sb_printf(b, "layout(std430, binding = %d) readonly buffer B%sq { uvec4 v[]; } %sq;\n",
                      at, name + 1, name);
    }
    for (int view = 0; view <= q; view++) {
      if (view == 0 && ssm_dtype_is_quant(v->type.dtype)) quant_after[i] = 1;
      const char *sfx = view ? "q" : "";
      if (nw == 1) {
        ssm_sb_printf(b, "#define ld%s%d(e) b%d%s.v[e]\n", sfx, i, i, sfx);
        continue;
      }
      ssm_sb_printf(b, "%s ld%s%d(uint e) {\n  uint win = SSM_WIN%s, w = e / win, r = e - w * win;\n",
                    view ? "uvec4" : t, sfx, i, view ? " / 4u" : "");
      for (int w = 0; w < nw; w++) {
        char name[32];
        if (w) snprintf(name, sizeof name, "b%dw%d%s", i, w, sfx);
        else snprintf(name, sizeof name, "b%d%s", i, sfx);
        if (w + 1 < nw) ssm_sb_printf(b, "  if (w == %du) return %s.v[r];\n", w, name);
        else ssm_sb_printf(b, "  return %s.v[r];\n}\n", name);
      }
    }
    if (quant_after[i]) quant_loads(b, i, &v->type);
  }
}

ssm_status ssm_cg_glsl_split(const ssm_cg_kernel *k, const int *windows, uint64_t window,
                             ssm_arena *a, const char **out) {
  *out = k->glsl;
  int extra = 0;
  for (int i = 0; i < k->nbindings; i++) {
    if (windows[i] < 1 || windows[i] > SSM_BUNDLE_GLSL_MAX_WINDOWS)
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a GLSL tensor would need %d windows of %llu "
                            "bytes (at most %d)", windows[i], (unsigned long long)window,
                            SSM_BUNDLE_GLSL_MAX_WINDOWS);
    if (windows[i] > 1 && (i == 0 || k->bind[i]->def->op == SSM_OP_STATE))
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a GLSL kernel writes a tensor split into "
                            "windows");
    extra += windows[i] - 1;
  }
  if (!extra) return NULL;
  if (k->nbindings + extra > SSM_BUNDLE_GLSL_MAX_BINDINGS)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "a GLSL kernel would bind %d storage windows of "
                          "%llu bytes (at most %d): use larger windows", k->nbindings + extra,
                          (unsigned long long)window, SSM_BUNDLE_GLSL_MAX_BINDINGS);
  unsigned long mark = ssm_nomem_mark();
  ssm_sb old = {0}, split = {0}, b = {0};
  ssm_cg_glsl_buffers(&old, k->nbindings, k->bind, k->glsl_vec4, NULL, 0);
  ssm_cg_glsl_buffers(&split, k->nbindings, k->bind, k->glsl_vec4, windows, window);
  ssm_status s = ssm_nomem_since(mark, "a GLSL kernel's storage windows");
  if (s) {
    ssm_sb_free(&old);
    ssm_sb_free(&split);
    return s;
  }
  const char *at = strstr(k->glsl, ssm_sb_str(&old));
  SSM_ASSERT(at && !strstr(at + 1, ssm_sb_str(&old)));
  ssm_sb_append(&b, k->glsl, (size_t)(at - k->glsl));
  ssm_sb_printf(&b, "%s%s", ssm_sb_str(&split), at + old.n);
  ssm_sb_free(&old);
  ssm_sb_free(&split);
  *out = ssm_cg_take(&b, a);
  return ssm_nomem_since(mark, "a GLSL kernel's storage windows");
}
