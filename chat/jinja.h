/*
 * jinja.h — a Jinja subset, enough for the chat templates that Hugging
 * Face models ship in tokenizer_config.json (chat_template), rendered the
 * way transformers' apply_chat_template renders them: trim_blocks and
 * lstrip_blocks on, no autoescaping, transformers' tojson (json.dumps with
 * ensure_ascii=False), raise_exception and strftime_now.
 *
 * Supported: {{ }}, {% %} and {# #} with '-' whitespace control; if / elif
 * / else, for (with tuple targets, an `if` filter, else, loop.index,
 * index0, revindex, revindex0, first, last, length, previtem, nextitem,
 * cycle), break / continue, set (names, namespace attributes, tuples, and
 * {% set x %}...{% endset %}), macro (defaults, keyword arguments, *args
 * at the call), generation, raw; Python-like expressions (conditional
 * expressions, and / or / not, comparisons, in, is tests, + - * / // % **
 * ~, subscripts, slices, attributes, calls, literals of lists, dicts and
 * tuples); the filters, tests, methods and globals listed in
 * jinja_builtins.c's tables. Anything else — a statement (call, filter,
 * include, extends, block, import, with, for ... recursive), a filter, a
 * test, a method or a global function the tables do not list — is refused
 * when the template is parsed, with NAME:LINE:COL, so a model whose
 * template needs more fails at startup rather than rendering wrong text.
 *
 * A template is untrusted: parsing is linear in its text and bounds its
 * nesting, and every render is bounded in nesting, steps of work, bytes of
 * output and of values (jinja_value.h), with checked integer arithmetic.
 * Past a bound, parse or render is an error with NAME:LINE:COL.
 *
 * Strings are UTF-8; their length, indexing and slicing count code points
 * as Python does; upper, lower, title, capitalize and strip change only
 * ASCII letters and whitespace.
 */
#ifndef SSM_JINJA_H
#define SSM_JINJA_H

#include <stddef.h>

#include "base/base.h"

struct cJSON;

typedef struct ssm_jinja ssm_jinja;

/* Parses `len` bytes of template text; `name` starts every message
 * ("chat_template:3:14: unsupported filter 'wordwrap'"). */
ssm_status ssm_jinja_parse(const char *name, const char *text, size_t len, ssm_jinja **out);
/* NULL is fine. */
void ssm_jinja_destroy(ssm_jinja *t);

/* Renders with the members of the JSON object `vars` as variables (JSON
 * numbers without a fraction become integers). *out is malloc'd. An error
 * while rendering names the place in the template; one raised by the
 * template (raise_exception) is SSM_ERR_INVALID with the template's
 * message. */
ssm_status ssm_jinja_render(const ssm_jinja *t, const struct cJSON *vars, char **out,
                            size_t *out_len);

#endif
