/*
 * wgsl.c — WGSL's memory slots (codegen.h): which slot each tensor of a
 * kernel is read through, and the complete module with the slots' storage
 * bindings and each tensor's accessors, once the bundle's layout says how
 * many windows a slot needs.
 */
#include "codegen/internal.h"

/* WGSL's memory slots: the result and every other activation share slot 0,
 * the states share one slot, the small weights one, and each weight of at
 * least SSM_CG_WGSL_OWN_SLOT_BYTES has its own, as does a value in a buffer
 * of its own (apart: the prefill's logits, plan_buffers.c). */
void ssm_cg_wgsl_slots(cg_ctx *c) {
  int shared[3] = {-1, -1, -1}; /* activations, states, small weights */
  c->nslots = 0;
  for (int i = 0; i < c->nbind; i++) {
    const ssm_value *v = c->bind[i];
    ssm_op op = v->def->op;
    int cls = op == SSM_OP_WEIGHT ? 2 : op == SSM_OP_STATE ? 1 : 0;
    uint64_t bytes = ssm_type_bytes(&v->type);
    int own = (cls == 2 && bytes >= SSM_CG_WGSL_OWN_SLOT_BYTES) ||
              (cls == 0 && ssm_node_int(v->def, "apart", 0));
    if (!own && shared[cls] >= 0) {
      c->slot[i] = shared[cls];
      continue;
    }
    c->slot[i] = c->nslots;
    c->slot_writable[c->nslots] = cls != 2;
    if (!own) shared[cls] = c->nslots;
    c->nslots++;
  }
}

ssm_status ssm_cg_wgsl_module(const ssm_cg_kernel *k, const int *windows, uint64_t window,
                              ssm_arena *a, const char **out) {
  *out = NULL;
  unsigned long mark = ssm_nomem_mark();
  ssm_sb b = {0};
  ssm_sb_printf(&b, "%s// memory: binding 0 holds the offsets; the slots' windows of SSM_WIN "
                "words follow\nconst SSM_WIN: u32 = %lluu;\n", k->wgsl,
                (unsigned long long)(window / 4));
  int binding = 1;
  for (int s = 0; s < k->nslots; s++) {
    int n = windows[s], rw = k->slot_writable[s];
    if (n < 1 || n > SSM_BUNDLE_WGSL_MAX_WINDOWS) {
      ssm_sb_free(&b);
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a WGSL memory slot would need %d windows of "
                            "%llu bytes (at most %d)", n, (unsigned long long)window,
                            SSM_BUNDLE_WGSL_MAX_WINDOWS);
    }
    for (int w = 0; w < n; w++)
      ssm_sb_printf(&b, "@group(0) @binding(%d) var<storage, %s> s%dw%d: array<u32>;\n",
                    binding++, rw ? "read_write" : "read", s, w);
    if (n == 1) continue;
    /* several windows: the window by index */
    for (int st = 0; st <= rw; st++) {
      ssm_sb_printf(&b, st ? "fn s%d_st(g: u32, v: u32) {\n" : "fn s%d_ld(g: u32) -> u32 {\n", s);
      ssm_sb_printf(&b, "  let w = g / SSM_WIN;\n  let r = g - w * SSM_WIN;\n");
      for (int w = 0; w < n; w++) {
        ssm_sb_printf(&b, w + 1 < n ? "  if (w == %du) { " : "  { ", w);
        ssm_sb_printf(&b, st ? "s%dw%d[r] = v;%s }\n" : "return s%dw%d[r];%s }\n", s, w,
                      st && w + 1 < n ? " return;" : "");
      }
      ssm_sb_printf(&b, "}\n");
    }
  }
  for (int i = 0; i < k->nbindings; i++) {
    int s = k->slot[i];
    unsigned half = k->access[i] & (SSM_CG_F16 | SSM_CG_BF16), quant = k->access[i] & (SSM_CG_Q8 | SSM_CG_Q4);
    const char *t = k->access[i] & SSM_CG_I32 ? "i32" : "f32";
    /* the word holding element e: s<s>w0[at] with one window, else through
     * s<s>_ld; a 16-bit element is half of word e / 2 */
    const char *at = ssm_arena_printf(a, "ssm_u.o[%d][%d] + %s", i / 4, i % 4, half ? "(e >> 1u)" : "e");
    const char *word = windows[s] == 1 ? ssm_arena_printf(a, "s%dw0[%s]", s, at)
                                       : ssm_arena_printf(a, "s%d_ld(%s)", s, at);
    if ((half || quant) && (k->access[i] & SSM_CG_WRITE)) {
      ssm_sb_free(&b);
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a WGSL kernel writes a 16-bit or quantized tensor");
    }
    if (quant && (k->access[i] & SSM_CG_READ)) {
      /* word w of the tensor, then element e's value (ssm_qvalue) */
      const char *wat = ssm_arena_printf(a, "ssm_u.o[%d][%d] + w", i / 4, i % 4);
      const char *wword = windows[s] == 1 ? ssm_arena_printf(a, "s%dw0[%s]", s, wat)
                                          : ssm_arena_printf(a, "s%d_ld(%s)", s, wat);
      ssm_qlayout l = ssm_qlayout_of(&k->type[i]);
      ssm_sb_printf(&b,
                    "fn b%d_w(w: u32) -> u32 { return %s; }\n"
                    "fn b%d_ld(e: u32) -> f32 {\n"
                    "  let r = e / %lldu;\n  let j = r * %lldu + (e - r * %lldu) / 32u;\n"
                    "  let d = unpack2x16float(b%d_w(%lluu + (j >> 1u)) >> ((j & 1u) << 4u)).x;\n"
                    "  return f32(%s) * d;\n}\n",
                    i, wword, i, (long long)l.k, (long long)l.blocks, (long long)l.k, i,
                    (unsigned long long)(l.scales / 4),
                    l.dtype == SSM_Q4_0
                        ? ssm_arena_printf(a, "i32((b%d_w(e >> 3u) >> ((e & 7u) << 2u)) & 15u) - 8", i)
                        : ssm_arena_printf(a, "extractBits(bitcast<i32>(b%d_w(e >> 2u)), (e & 3u) << 3u, 8u)", i));
      continue;
    }
    if (k->access[i] & SSM_CG_READ) {
      if (half == SSM_CG_BF16)
        ssm_sb_printf(&b, "fn b%d_ld(e: u32) -> f32 { return bitcast<f32>(((%s >> ((e & 1u) << 4u)) "
                      "& 0xffffu) << 16u); }\n", i, word);
      else if (half == SSM_CG_F16)
        ssm_sb_printf(&b, "fn b%d_ld(e: u32) -> f32 { return unpack2x16float(%s >> ((e & 1u) << 4u)).x; }\n",
                      i, word);
      else
        ssm_sb_printf(&b, "fn b%d_ld(e: u32) -> %s { return bitcast<%s>(%s); }\n", i, t, t, word);
    }
    if (!(k->access[i] & SSM_CG_WRITE)) continue;
    if (windows[s] == 1)
      ssm_sb_printf(&b, "fn b%d_st(e: u32, v: %s) { %s = bitcast<u32>(v); }\n", i, t, word);
    else
      ssm_sb_printf(&b, "fn b%d_st(e: u32, v: %s) { s%d_st(%s, bitcast<u32>(v)); }\n", i, t, s, at);
  }
  *out = ssm_cg_take(&b, a);
  return ssm_nomem_since(mark, "a WGSL module");
}
