/*
 * lang.c — the kernel languages' spellings (lang.def) as a table, one entry
 * per language, the substitution of their arguments, and the few spellings
 * that are built from several rows (function heads, float literals, loads
 * of 16-bit tensors).
 */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "codegen/internal.h"

const ssm_cg_lang ssm_cg_langs[SSM_LANG_COUNT] = {
    [SSM_LANG_GLSL] = {
#define SPELL(field, glsl, wgsl) .field = glsl,
#define HAS(field, glsl, wgsl) .field = glsl,
#include "codegen/lang.def"
#undef SPELL
#undef HAS
    },
    [SSM_LANG_WGSL] = {
#define SPELL(field, glsl, wgsl) .field = wgsl,
#define HAS(field, glsl, wgsl) .field = wgsl,
#include "codegen/lang.def"
#undef SPELL
#undef HAS
    },
};

static void vspell(ssm_sb *b, const char *pattern, va_list ap) {
  const char *args[9];
  int n = 0;
  for (const char *p = pattern; (p = strchr(p, '$')); p++) {
    SSM_ASSERT(p[1] >= '1' && p[1] <= '9');
    if (p[1] - '0' > n) n = p[1] - '0';
  }
  for (int i = 0; i < n; i++) args[i] = va_arg(ap, const char *);
  for (const char *mark; (mark = strchr(pattern, '$')); pattern = mark + 2) {
    ssm_sb_append(b, pattern, (size_t)(mark - pattern));
    const char *arg = args[mark[1] - '1'];
    ssm_sb_append(b, arg, strlen(arg));
  }
  ssm_sb_append(b, pattern, strlen(pattern));
}

void ssm_cg_spell(ssm_sb *b, const char *pattern, ...) {
  va_list ap;
  va_start(ap, pattern);
  vspell(b, pattern, ap);
  va_end(ap);
}

const char *ssm_cg_spelled(ssm_arena *a, const char *pattern, ...) {
  ssm_sb b = {0};
  va_list ap;
  va_start(ap, pattern);
  vspell(&b, pattern, ap);
  va_end(ap);
  const char *r = ssm_arena_strdup(a, ssm_sb_str(&b));
  ssm_sb_free(&b);
  return r;
}

/* ---- spellings of several rows ------------------------------------------- */

/* A float literal; inf and NaN from their bits (lang.def's from_bits). */
const char *ssm_cg_float_lit(const cg_ctx *c, double v) {
  if (isnan(v)) return ssm_cg_spelled(c->a, lang(c)->from_bits, "0x7fc00000u");
  if (isinf(v))
    return ssm_cg_spelled(c->a, lang(c)->from_bits, v > 0 ? "0x7f800000u" : "0xff800000u");
  return ssm_arena_printf(c->a, "%s(%.9g)", lang(c)->f32, v);
}

/* The head of a generated function returning type `ret` of `params` (names
 * separated by spaces: `acc` is an f32, the others u32 coordinates). */
void ssm_cg_fn_head_typed(const cg_ctx *c, ssm_sb *b, const char *ret, const char *name,
                          const char *params) {
  const ssm_cg_lang *l = lang(c);
  ssm_cg_spell(b, l->fn_open, name, ret);
  for (const char *p = params; *p;) {
    size_t n = strcspn(p, " ");
    int is_acc = n == 3 && !strncmp(p, "acc", 3);
    ssm_cg_spell(b, l->fn_param, ssm_arena_strndup(c->a, p, n), is_acc ? l->f32 : l->u32);
    p += n;
    while (*p == ' ') p++;
    if (*p) ssm_sb_printf(b, ", ");
  }
  ssm_cg_spell(b, l->fn_close, ret);
}

/* The head of a generated f32 function (fn_head_typed). */
void ssm_cg_fn_head(const cg_ctx *c, ssm_sb *b, const char *name, const char *params) {
  ssm_cg_fn_head_typed(c, b, lang(c)->f32, name, params);
}

/* `NAME(params) { return value; }`, a constant load */
void ssm_cg_const_fn(const cg_ctx *c, ssm_sb *b, const char *name, const char *params,
                     const char *value) {
  ssm_cg_fn_head(c, b, name, params);
  ssm_sb_printf(b, "{ return %s; }\n", value);
}

/* Element `idx` of binding b as a float (or int): lang.def's load, or for a
 * 16-bit or quantized weight load_bf16, load_f16 or load_q (the math stays
 * f32). */
void ssm_cg_mem_load(const cg_ctx *c, ssm_sb *out, int b, ssm_dtype dt, const char *idx) {
  const ssm_cg_lang *l = lang(c);
  const char *pattern = dt == SSM_BF16   ? l->load_bf16
                        : dt == SSM_F16  ? l->load_f16
                        : ssm_dtype_is_quant(dt) ? l->load_q
                                         : l->load;
  ssm_cg_spell(out, pattern, ssm_arena_printf(c->a, "%d", b), idx);
}
