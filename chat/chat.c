/*
 * chat.c — a model's chat template (chat.h) on the Jinja subset (jinja.h).
 */
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/stat.h>

#include "chat/chat.h"
#include "chat/jinja.h"

#define MAX_CONFIG ((size_t)64 << 20)

struct ssm_chat {
  ssm_jinja *t;
  char *source;
  cJSON *tokens; /* {"bos_token": "...", ...} */
};

static int exists(const char *path) {
  struct stat st;
  return !stat(path, &st);
}

/* A special token as a string: "x" or {"content": "x", ...}. */
static const char *token_text(const cJSON *j) {
  if (cJSON_IsString(j)) return j->valuestring;
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
  return cJSON_IsString(c) ? c->valuestring : NULL;
}

static ssm_status read_config(const char *dir, cJSON **out) {
  *out = NULL;
  ssm_sb p = {0};
  ssm_sb_printf(&p, "%s/tokenizer_config.json", dir);
  ssm_status s = ssm_sb_status(&p, "the chat template's path");
  if (!s && exists(p.s)) {
    char *text;
    size_t n;
    s = ssm_file_read(p.s, MAX_CONFIG, &text, &n);
    if (!s) {
      s = ssm_json_parse(p.s, text, n, out);
      free(text);
    }
    if (!s && !cJSON_IsObject(*out)) {
      cJSON_Delete(*out);
      *out = NULL;
      s = ssm_status_new(SSM_ERR_INVALID, "%s: not a JSON object", p.s);
    }
  }
  ssm_sb_free(&p);
  return s;
}

/* The template text of tokenizer_config.json's chat_template. */
static ssm_status config_template(const cJSON *config, const char *path, const char **out) {
  *out = NULL;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(config, "chat_template");
  if (!t || cJSON_IsNull(t)) return NULL;
  if (cJSON_IsString(t)) {
    *out = t->valuestring;
    return NULL;
  }
  if (cJSON_IsArray(t)) { /* [{"name": "default", "template": "..."}, ...] */
    for (const cJSON *e = t->child; e; e = e->next) {
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"),
                  *text = cJSON_GetObjectItemCaseSensitive(e, "template");
      if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(text)) {
        *out = text->valuestring;
        return NULL;
      }
    }
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: chat_template is a list of named templates "
                          "without one named \"default\"", path);
  }
  return ssm_status_new(SSM_ERR_INVALID, "%s: chat_template is neither a string nor a list", path);
}

ssm_status ssm_chat_open(const char *dir, const char *template_file, ssm_chat **out) {
  *out = NULL;
  cJSON *config = NULL;
  SSM_TRY(read_config(dir, &config));
  ssm_sb path = {0};
  char *file_text = NULL;
  size_t file_len = 0;
  const char *text = NULL;
  ssm_status s = NULL;
  ssm_sb_printf(&path, "%s", template_file ? template_file : dir);
  if (!template_file) ssm_sb_printf(&path, "/chat_template.jinja");
  if ((s = ssm_sb_status(&path, "the chat template's path"))) {
    /* nothing to read */
  } else if (template_file || exists(path.s)) {
    s = ssm_file_read(path.s, MAX_CONFIG, &file_text, &file_len);
    if (s && template_file) s = ssm_status_wrap(s, "--chat-template");
    text = file_text;
  } else {
    ssm_sb_clear(&path);
    ssm_sb_printf(&path, "%s/tokenizer_config.json", dir);
    s = ssm_sb_status(&path, "the chat template's path");
    if (!s) s = config_template(config, path.s, &text);
  }
  ssm_chat *c = NULL;
  if (!s && text) {
    s = ssm_status_wrap(ssm_alloc(1, sizeof *c, (void **)&c), "the chat template");
    if (!s) s = ssm_sb_take(&path, "the chat template's path", &c->source);
    if (!s) {
      c->tokens = cJSON_CreateObject();
      static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token", NULL};
      for (int i = 0; names[i]; i++) {
        const char *v = token_text(cJSON_GetObjectItemCaseSensitive(config, names[i]));
        if (v) cJSON_AddStringToObject(c->tokens, names[i], v);
      }
      s = ssm_jinja_parse(c->source, text, file_text ? file_len : strlen(text), &c->t);
    }
    if (s) {
      ssm_chat_close(c);
      c = NULL;
    }
  }
  ssm_sb_free(&path);
  free(file_text);
  cJSON_Delete(config);
  *out = c;
  return s;
}

void ssm_chat_close(ssm_chat *c) {
  if (!c) return;
  ssm_jinja_destroy(c->t);
  cJSON_Delete(c->tokens);
  free(c->source);
  free(c);
}

const char *ssm_chat_source(const ssm_chat *c) { return c->source; }

const char *ssm_chat_token(const ssm_chat *c, const char *name) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(c->tokens, name);
  return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* A deep copy of `item` (none: nothing) as `key` of `obj`; 0 when out of memory. */
static int add_copy(cJSON *obj, const char *key, const cJSON *item) {
  if (!item) return 1;
  cJSON *copy = cJSON_Duplicate(item, 1);
  if (copy && cJSON_AddItemToObject(obj, key, copy)) return 1;
  cJSON_Delete(copy);
  return 0;
}

ssm_status ssm_chat_render(const ssm_chat *c, const cJSON *messages, const cJSON *tools,
                           const cJSON *documents, int add_generation_prompt, char **out,
                           size_t *out_len) {
  /* cJSON reports exhausted memory as NULL or false, without a size: the
   * size given is one node's, the least that failed */
  cJSON *vars = cJSON_Duplicate(c->tokens, 1);
  int ok = vars && add_copy(vars, "messages", messages) && add_copy(vars, "tools", tools) &&
           add_copy(vars, "documents", documents) &&
           cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt);
  if (!ok) {
    cJSON_Delete(vars);
    return ssm_nomem(sizeof(cJSON), "the chat template's variables");
  }
  ssm_status s = ssm_jinja_render(c->t, vars, out, out_len);
  cJSON_Delete(vars);
  return s;
}
