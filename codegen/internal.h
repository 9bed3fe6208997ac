/*
 * internal.h — what the files of codegen/ share and nothing else sees.
 */
#ifndef SSM_CODEGEN_INTERNAL_H
#define SSM_CODEGEN_INTERNAL_H

#include "codegen/codegen.h"

/* ---- the spellings of a kernel language (lang.def, lang.c) ------------------- */

typedef struct {
#define SPELL(field, glsl, wgsl) const char *field;
#define HAS(field, glsl, wgsl) int field;
#include "codegen/lang.def"
#undef SPELL
#undef HAS
} ssm_cg_lang;

/* One entry per ssm_lang. */
extern const ssm_cg_lang ssm_cg_langs[SSM_LANG_COUNT];

/* Appends spelling `pattern` (a SPELL field) with $1, $2, ... replaced by
 * the strings that follow: every argument its row names, whether or not
 * this language's spelling uses it. */
void ssm_cg_spell(ssm_sb *b, const char *pattern, ...);
/* The same, as a string in `a`. */
const char *ssm_cg_spelled(ssm_arena *a, const char *pattern, ...);

/* ---- templates (template.c) ----------------------------------------------------- */

/* Expands snippet `name` of templates/<family>.<lang>.in (template.c says
 * what a snippet is) with `kv`, as ssm_cg_template_expand does a template. */
ssm_status ssm_cg_snippet_expand(ssm_arena *a, const char *family, ssm_lang lang,
                                 const char *name, const char *const *kv, char **out);

#endif
