/*
 * chat.h — a model's chat template: read from its directory as
 * transformers reads it (chat_template.jinja, else tokenizer_config.json's
 * chat_template, a string or the "default" of a list of named templates;
 * the special tokens bos_token, eos_token, unk_token and pad_token, each a
 * string or an {"content": ...} object) and applied to OpenAI-style
 * messages as apply_chat_template(messages, tokenize=False,
 * add_generation_prompt=...) does.
 */
#ifndef SSM_CHAT_H
#define SSM_CHAT_H

#include "base/base.h"

struct cJSON;

typedef struct ssm_chat ssm_chat;

/* Reads `dir`'s template, or the Jinja file `template_file` when not NULL
 * (the directory still gives the special tokens). *out is NULL, with no
 * error, when the directory has no template and none is given. Any
 * construct the Jinja subset (jinja.h) lacks is an error naming the file,
 * line and column. */
ssm_status ssm_chat_open(const char *dir, const char *template_file, ssm_chat **out);
void ssm_chat_close(ssm_chat *c);
/* Where the template came from ("DIR/tokenizer_config.json"). */
const char *ssm_chat_source(const ssm_chat *c);
/* The text of special token `name` ("eos_token", ...) as the model's
 * directory gives it, or NULL when it gives none. */
const char *ssm_chat_token(const ssm_chat *c, const char *name);

/* Renders `messages` (a JSON array of {role, content, ...}); `tools` and
 * `documents` may be NULL. *out is malloc'd. */
ssm_status ssm_chat_render(const ssm_chat *c, const struct cJSON *messages,
                           const struct cJSON *tools, const struct cJSON *documents,
                           int add_generation_prompt, char **out, size_t *out_len);

#endif
