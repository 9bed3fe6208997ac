/*
 * frontend.c — builds op IR graphs from a model description
 * (models/NAME.yaml) bound to a Hugging Face config.json.
 *
 * Loading reads the YAML with libyaml's document API, checks its structure,
 * binds every param to its config.json value (cJSON), and builds the decode
 * graph once so that a bad description fails at load with "file:line:col:
 * message". Building walks the `graph` statements in order: each call
 * `name = op(args, key=value)` appends one node (nested calls append theirs
 * first), names are rebound freely (SSA underneath), `if:` maps are decided at
 * build time, `assert:` maps stop the build with their message when false,
 * and `repeat:` runs a block once per layer with the layer index as `i`; the
 * block may be chosen per layer (`block: {if: COND, then: A, else: B}`, a
 * layer schedule). Every block run is a layer with an absolute index (counted
 * across repeats) that names its states, `l<index>.<state>`. Weights and
 * states become `weight`/`state` nodes at their first use, one per distinct
 * tensor name. Built-in names: `tokens` (the run's token ids, i32[T]), `pos`
 * (the absolute position of the run's first token, i32[1]; both become
 * inputs when used), `T`, `i`, and the param `max_seq` (default 2048, set by
 * ssm_model_set_param: the rows of a KV cache). Result types come from
 * ssm_op_infer; the finished graph is verified.
 *
 * This file loads: it reads the files (or the embedded YAMLs), checks the
 * description's top level, and binds it. What it builds on is listed in
 * internal.h: YAML (yaml.c), params (params.c), the builder's scopes
 * (scope.c), statements to IR (graph.c), expressions (expr.c).
 */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/internal.h"

#define MAX_YAML_BYTES (16u << 20)
#define DEFAULT_MAX_SEQ 2048
#define MAX_MAX_SEQ (1 << 24)

/* ---- loading ----------------------------------------------------------- */

static ssm_status check_blocks(ssm_model *m) {
  static const char *const keys[] = {"in", "out", "weights", "state", "body", NULL};
  static const char *const required[] = {"in", "out", "body", NULL};
  if (!m->blocks) return NULL;
  SSM_TRY(ssm_fe_check_map(m, m->blocks, "blocks", NULL, NULL));
  for (yaml_node_pair_t *p = m->blocks->data.mapping.pairs.start; p < m->blocks->data.mapping.pairs.top; p++) {
    yaml_node_t *spec = ynode(m, p->value);
    SSM_TRY(ssm_fe_check_map(m, spec, "a block", keys, required));
    yaml_node_t *in = map_get(m, spec, "in");
    if (in->type == YAML_SEQUENCE_NODE) {
      if (in->data.sequence.items.top == in->data.sequence.items.start)
        return ssm_src_error(node_pos(m, in), "a block's in list is empty");
      for (yaml_node_item_t *it = in->data.sequence.items.start; it < in->data.sequence.items.top; it++)
        SSM_TRY(ssm_fe_expect_ident(m, ynode(m, *it), "a block's input"));
    } else {
      SSM_TRY(ssm_fe_expect_ident(m, in, "a block's in (a name, or a list of names)"));
    }
    SSM_TRY(ssm_fe_expect_ident(m, map_get(m, spec, "out"), "a block's out"));
    SSM_TRY(ssm_fe_expect_type(m, map_get(m, spec, "body"), YAML_SEQUENCE_NODE, "a block's body"));
  }
  return NULL;
}

static ssm_status model_types_of(ssm_model *m, yaml_node_t **out) {
  yaml_node_t *root = yaml_document_get_root_node(&m->doc);
  *out = map_get(m, root, "model_types");
  if (*out && (*out)->type != YAML_SEQUENCE_NODE)
    SSM_TRY(ssm_fe_expect_type(m, *out, YAML_SEQUENCE_NODE, "model_types"));
  return NULL;
}

static int model_handles(ssm_model *m, const char *type);

/* A config.json whose model_type is one of the description's `nested:`
 * model_types keeps the model's own config under `nested.config` (a
 * multimodal checkpoint's text model under text_config): *cfg becomes that
 * object, and weight names that begin with `nested.weights.from` are read
 * as beginning with `nested.weights.to`. The checkpoint's other tensors (a
 * vision tower's) are not read. */
static ssm_status unnest_config(ssm_model *m, const cJSON **cfg) {
  static const char *const keys[] = {"model_types", "config", "weights", NULL};
  static const char *const wkeys[] = {"from", "to", NULL};
  yaml_node_t *nested = map_get(m, yaml_document_get_root_node(&m->doc), "nested");
  if (!nested) return NULL;
  SSM_TRY(ssm_fe_check_map(m, nested, "nested", keys, keys));
  yaml_node_t *types = map_get(m, nested, "model_types"), *key = map_get(m, nested, "config"),
              *w = map_get(m, nested, "weights");
  SSM_TRY(ssm_fe_expect_type(m, types, YAML_SEQUENCE_NODE, "nested.model_types"));
  SSM_TRY(ssm_fe_expect_type(m, key, YAML_SCALAR_NODE, "nested.config"));
  SSM_TRY(ssm_fe_check_map(m, w, "nested.weights", wkeys, wkeys));
  yaml_node_t *from = map_get(m, w, "from"), *to = map_get(m, w, "to");
  SSM_TRY(ssm_fe_expect_type(m, from, YAML_SCALAR_NODE, "nested.weights.from"));
  SSM_TRY(ssm_fe_expect_type(m, to, YAML_SCALAR_NODE, "nested.weights.to"));
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(*cfg, "model_type");
  int outer = 0;
  for (yaml_node_item_t *it = types->data.sequence.items.start; it < types->data.sequence.items.top; it++) {
    SSM_TRY(ssm_fe_expect_type(m, ynode(m, *it), YAML_SCALAR_NODE, "a model type"));
    if (cJSON_IsString(mt) && scalar_is(ynode(m, *it), mt->valuestring)) outer = 1;
  }
  if (!outer) return NULL;
  const cJSON *inner = cJSON_GetObjectItemCaseSensitive(*cfg, stext(key));
  if (!cJSON_IsObject(inner))
    return ssm_status_new(SSM_ERR_INVALID, "%s: model_type '%s' keeps the model's config under '%s', "
                          "which it %s", m->config_path, mt->valuestring, stext(key),
                          inner ? "does not hold as an object" : "lacks");
  const cJSON *imt = cJSON_GetObjectItemCaseSensitive(inner, "model_type");
  if (cJSON_IsString(imt) && !model_handles(m, imt->valuestring))
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: %s.model_type '%.64s' is not one %s describes",
                          m->config_path, stext(key), imt->valuestring, m->file);
  m->weight_from = ssm_arena_strdup(m->arena, stext(from));
  m->weight_to = ssm_arena_strdup(m->arena, stext(to));
  if (!m->weight_from || !m->weight_to) return ssm_arena_status(m->arena, "the nested weight names");
  *cfg = inner;
  return NULL;
}

static ssm_status model_init(ssm_model *m, const cJSON *cfg) {
  static const char *const keys[] = {"ssmc", "architecture", "model_types", "nested", "params", "blocks", "weights", "graph", NULL};
  static const char *const required[] = {"ssmc", "architecture", "graph", NULL};
  yaml_node_t *root = yaml_document_get_root_node(&m->doc);
  SSM_TRY(ssm_fe_check_map(m, root, "the model description", keys, required));
  yaml_node_t *ver = map_get(m, root, "ssmc");
  if (!scalar_is(ver, "1"))
    return ssm_src_error(node_pos(m, ver), "unsupported ssmc format version '%s' (this build reads 1)",
                         ver->type == YAML_SCALAR_NODE ? stext(ver) : "?");
  yaml_node_t *arch = map_get(m, root, "architecture"), *types;
  SSM_TRY(ssm_fe_expect_ident(m, arch, "architecture"));
  m->arch = ssm_arena_strdup(m->arena, stext(arch));
  SSM_TRY(model_types_of(m, &types));
  for (yaml_node_item_t *it = types ? types->data.sequence.items.start : NULL; types && it < types->data.sequence.items.top; it++)
    SSM_TRY(ssm_fe_expect_type(m, ynode(m, *it), YAML_SCALAR_NODE, "a model type"));
  const cJSON *outer = cfg;
  SSM_TRY(unnest_config(m, &cfg));
  char *cfg_text = cJSON_PrintUnformatted(cfg);
  if (!cfg_text)
    return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the config text", m->config_path);
  m->source_hash = ssm_fnv1a(m->source_hash, cfg_text, strlen(cfg_text) + 1);
  cJSON_free(cfg_text);
  yaml_node_t *params = map_get(m, root, "params");
  if (params) SSM_TRY(ssm_fe_bind_params(m, params, cfg));
  const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
  if (!eos) eos = cJSON_GetObjectItemCaseSensitive(outer, "eos_token_id");
  if (cJSON_IsArray(eos)) eos = cJSON_GetArrayItem(eos, 0);
  if (cJSON_IsNumber(eos) && eos->valuedouble >= 0 && eos->valuedouble < (1 << 30) &&
      eos->valuedouble == floor(eos->valuedouble))
    m->eos = (int64_t)eos->valuedouble;
  m->blocks = map_get(m, root, "blocks");
  m->weights = map_get(m, root, "weights");
  m->graph = map_get(m, root, "graph");
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++)
    if (scalar_is(ynode(m, p->key), "graph")) m->graph_key = ynode(m, p->key);
  SSM_TRY(check_blocks(m));
  SSM_TRY(ssm_fe_expect_type(m, m->graph, YAML_SEQUENCE_NODE, "graph"));
  ssm_graph *g;
  SSM_TRY(ssm_model_build(m, 1, &g));
  ssm_graph_destroy(g);
  return NULL;
}

static ssm_status model_new(const char *file, const char *config_path, ssm_model **out) {
  ssm_arena *a;
  SSM_TRY(ssm_status_wrap(ssm_arena_create(&a), "%s", file));
  ssm_model *m = ssm_arena_alloc(a, sizeof *m);
  if (!m) {
    ssm_status s = ssm_arena_status(a, "the model");
    ssm_arena_destroy(a);
    return ssm_status_wrap(s, "%s", file);
  }
  m->arena = a;
  m->file = ssm_arena_strdup(a, file);
  m->config_path = ssm_arena_strdup(a, config_path ? config_path : "");
  m->max_seq = DEFAULT_MAX_SEQ;
  m->eos = -1;
  *out = m;
  return NULL;
}

void ssm_model_close(ssm_model *m) {
  if (!m) return;
  if (m->has_doc) yaml_document_delete(&m->doc);
  cJSON_Delete(m->config_used);
  ssm_arena_destroy(m->arena);
}

/* Reads YAML text into a new model (no config bound yet). */
static ssm_status model_read(const char *file, const char *text, size_t len, const char *config_path,
                             ssm_model **out) {
  ssm_model *m = NULL;
  SSM_TRY(model_new(file, config_path, &m));
  ssm_status s = ssm_fe_yaml_read(file, text, len, &m->doc);
  if (s) {
    ssm_model_close(m);
    return s;
  }
  m->has_doc = 1;
  m->source_hash = ssm_fnv1a(SSM_FNV_INIT, text, len);
  *out = m;
  return NULL;
}

static int model_handles(ssm_model *m, const char *type) {
  yaml_node_t *types;
  ssm_status s = model_types_of(m, &types);
  if (s) {
    ssm_status_free(s);
    return 0;
  }
  for (yaml_node_item_t *it = types ? types->data.sequence.items.start : NULL; types && it < types->data.sequence.items.top; it++)
    if (scalar_is(ynode(m, *it), type)) return 1;
  return 0;
}

/* The model_types of the description's `nested:` list `type`. */
static int model_nests(ssm_model *m, const char *type) {
  yaml_node_t *nested = map_get(m, yaml_document_get_root_node(&m->doc), "nested");
  yaml_node_t *types = nested && nested->type == YAML_MAPPING_NODE ? map_get(m, nested, "model_types") : NULL;
  if (!types || types->type != YAML_SEQUENCE_NODE) return 0;
  for (yaml_node_item_t *it = types->data.sequence.items.start; it < types->data.sequence.items.top; it++)
    if (scalar_is(ynode(m, *it), type)) return 1;
  return 0;
}

/* Picks the embedded YAML whose model_types lists the config's model_type. */
static ssm_status pick_embedded(const char *config_path, const cJSON *cfg, ssm_model **out) {
  *out = NULL;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  if (!cJSON_IsString(mt)) return ssm_status_new(SSM_ERR_INVALID, "%s: no string 'model_type'", config_path);
  char known[1024] = "";
  for (int k = 0; ssm_models_embedded_name(k); k++) {
    const char *fname = ssm_models_embedded_name(k);
    char file[256];
    snprintf(file, sizeof file, "models/%s", fname);
    const char *text = ssm_models_embedded(fname);
    ssm_model *m;
    SSM_TRY(model_read(file, text, strlen(text), config_path, &m));
    if (model_handles(m, mt->valuestring) || model_nests(m, mt->valuestring)) {
      *out = m;
      return NULL;
    }
    yaml_node_t *types = NULL;
    ssm_status_free(model_types_of(m, &types));
    if (types && types->type != YAML_SEQUENCE_NODE) types = NULL;
    for (yaml_node_item_t *it = types ? types->data.sequence.items.start : NULL;
         types && it < types->data.sequence.items.top; it++) {
      yaml_node_t *t = ynode(m, *it);
      if (t->type != YAML_SCALAR_NODE) continue;
      size_t used = strlen(known);
      snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", stext(t));
    }
    ssm_model_close(m);
  }
  return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported (known: %s)", config_path,
                        mt->valuestring, known);
}

/* A file that is binary (a NUL byte among its first bytes, which no YAML
 * holds) or named .ssmb is no description: most likely a bundle whose
 * header is damaged, which is what the message says rather than asking
 * for a config.json. */
static ssm_status not_binary(const char *model) {
  int fd;
  size_t size;
  ssm_status s = ssm_file_open(model, &fd, &size);
  if (s) {
    ssm_status_free(s); /* said in context, when it is read */
    return NULL;
  }
  char head[64];
  ssize_t n = read(fd, head, sizeof head);
  close(fd);
  int bundle;
  SSM_TRY(ssm_file_bundle_magic(model, head, (long)n, &bundle));
  return bundle ? ssm_status_new(SSM_ERR_INVALID, "%s: a compiled bundle, not a model "
                                 "description (an architecture YAML, IR text or a model directory)",
                                 model)
                : NULL;
}

ssm_status ssm_model_open(const char *model, const char *config_path, ssm_model **out) {
  *out = NULL;
  struct stat st;
  cJSON *cfg = NULL;
  ssm_model *m = NULL;
  ssm_status s = NULL;
  char *text = NULL;
  if (!stat(model, &st) && S_ISDIR(st.st_mode)) {
    ssm_sb path = {0};
    if (!config_path) ssm_sb_printf(&path, "%s/config.json", model);
    const char *cp = config_path ? config_path : ssm_sb_str(&path);
    s = ssm_sb_status(&path, model);
    if (!s) s = ssm_fe_json_read(cp, &cfg);
    if (!s) s = pick_embedded(cp, cfg, &m);
    ssm_sb_free(&path);
  } else {
    if (!stat(model, &st) && !S_ISREG(st.st_mode)) { /* a FIFO or device: say so, not "needs a config" */
      int fd;
      size_t size;
      SSM_TRY(ssm_file_open(model, &fd, &size));
      close(fd); /* replaced by a regular file meanwhile: read below */
    }
    SSM_TRY(not_binary(model));
    if (!config_path)
      return ssm_status_new(SSM_ERR_INVALID, "%s: a model description needs a config.json (--config)", model);
    SSM_TRY(ssm_fe_json_read(config_path, &cfg));
    /* "NAME.yaml" or "models/NAME.yaml" that is not on disk: the embedded copy */
    const char *base = strncmp(model, "models/", 7) ? model : model + 7;
    const char *embedded = !strchr(base, '/') && stat(model, &st) ? ssm_models_embedded(base) : NULL;
    size_t len = 0;
    if (embedded) {
      char file[256];
      snprintf(file, sizeof file, "models/%s", base);
      s = model_read(file, embedded, strlen(embedded), config_path, &m);
    } else {
      s = ssm_file_read(model, MAX_YAML_BYTES, &text, &len);
      if (!s) s = model_read(model, text, len, config_path, &m);
      free(text);
    }
  }
  if (!s) s = model_init(m, cfg);
  if (m) s = ssm_arena_check(m->arena, s, "the model");
  cJSON_Delete(cfg);
  if (s) {
    ssm_model_close(m);
    return s;
  }
  *out = m;
  return NULL;
}

ssm_status ssm_model_open_text(const char *yaml_name, const char *yaml, size_t yaml_len,
                               const char *config_name, const char *config, size_t config_len,
                               ssm_model **out) {
  *out = NULL;
  if (yaml_len > MAX_YAML_BYTES)
    return ssm_status_new(SSM_ERR_INVALID, "%s: larger than %u bytes", yaml_name, MAX_YAML_BYTES);
  cJSON *cfg;
  SSM_TRY(ssm_json_parse_config(config_name, config, config_len, &cfg));
  ssm_model *m = NULL;
  ssm_status s = model_read(yaml_name, yaml, yaml_len, config_name, &m);
  if (!s) s = model_init(m, cfg);
  if (m) s = ssm_arena_check(m->arena, s, "the model");
  cJSON_Delete(cfg);
  if (s) {
    ssm_model_close(m);
    return s;
  }
  *out = m;
  return NULL;
}

const char *ssm_model_arch(const ssm_model *m) { return m->arch; }
int64_t ssm_model_eos(const ssm_model *m) { return m->eos; }

ssm_status ssm_model_set_param(ssm_model *m, const char *name, int64_t v) {
  if (!strcmp(name, "max_seq")) {
    if (v < 1 || v > MAX_MAX_SEQ)
      return ssm_status_new(SSM_ERR_INVALID, "--max-seq must be in 1..%d, got %lld", MAX_MAX_SEQ,
                            (long long)v);
    m->max_seq = v;
    return NULL;
  }
  for (int k = 0; k < m->nparams; k++)
    if (!strcmp(m->params[k].name, name)) {
      m->params[k].v = (ssm_scalar){.kind = SSM_SC_INT, .i = v};
      return NULL;
    }
  return ssm_status_new(SSM_ERR_INVALID, "%s: no param '%s' to set", m->file, name);
}

ssm_status ssm_model_config_used(const ssm_model *m, char **out_json) {
  *out_json = NULL;
  if (!m->config_used) return ssm_strdup("{}", "the config keys a model reads", out_json);
  char *text = cJSON_PrintUnformatted(m->config_used);
  if (!text) return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the config keys "
                                   "it reads", m->file);
  ssm_status s = ssm_strdup(text, "the config keys a model reads", out_json);
  cJSON_free(text);
  return s;
}

uint64_t ssm_model_digest(const ssm_model *m) {
  uint64_t h = ssm_fnv1a(SSM_FNV_INIT, &m->source_hash, sizeof m->source_hash);
  h = ssm_fnv1a(h, &m->max_seq, sizeof m->max_seq);
  for (int k = 0; k < m->nparams; k++) {
    const ssm_scalar *v = &m->params[k].v;
    int32_t kind = (int32_t)v->kind;
    h = ssm_fnv1a(h, m->params[k].name, strlen(m->params[k].name) + 1);
    h = ssm_fnv1a(h, &kind, sizeof kind);
    h = v->kind == SSM_SC_FLOAT ? ssm_fnv1a(h, &v->f, sizeof v->f) : ssm_fnv1a(h, &v->i, sizeof v->i);
  }
  return h;
}

int ssm_model_param(const ssm_model *m, const char *name, int64_t *out) {
  ssm_scalar v;
  if (!ssm_fe_param_find(m, name, strlen(name), &v) || v.kind == SSM_SC_FLOAT) return 0;
  *out = v.i;
  return 1;
}
