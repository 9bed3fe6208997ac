/*
 * frontend.h — from a model description (models/<name>.yaml) and a Hugging
 * Face config.json to op IR graphs: the YAML document (yaml.c), params bound
 * to config.json (params.c), names in scope (scope.c), statements to graph
 * nodes (graph.c) and the model object (frontend.c); the expression language
 * of the YAML strings is expr.c.
 */
#ifndef SSM_FRONTEND_H
#define SSM_FRONTEND_H

#include "ir/ir.h"

/* A model: an architecture description bound to one config.json. */
typedef struct ssm_model ssm_model;

/* Loads MODEL, which is an architecture YAML (then `config_path` is
 * required) or a Hugging Face model directory (config.json in it; its
 * `model_type` picks models/<yaml>; `config_path` overrides). */
ssm_status ssm_model_open(const char *model, const char *config_path,
                          ssm_model **out);
/* Loads an architecture YAML and its config.json given as text (neither needs
 * a terminating NUL); the names stand for them in messages. What
 * ssm_model_open does after reading the files. */
ssm_status ssm_model_open_text(const char *yaml_name, const char *yaml, size_t yaml_len,
                               const char *config_name, const char *config, size_t config_len,
                               ssm_model **out);
void ssm_model_close(ssm_model *m);
/* Builds the graph that processes `tokens` tokens per run (decode: 1). */
ssm_status ssm_model_build(ssm_model *m, int tokens, ssm_graph **out);
/* Builds the graph named "batch" that advances `rows` sequences by one token
 * each: T is `rows`, every state gets a first dim of `rows` (row b is
 * sequence b's) and the name SSM_SLOTS_PREFIX + its name, and the ops that
 * carry state or read positions take batch=1: the input "pos" is i32[rows],
 * row b's position. A model with delta_rule is refused. */
ssm_status ssm_model_build_batch(ssm_model *m, int rows, ssm_graph **out);
/* The names of a batched graph's states: "slots.l0.ssm_state". */
#define SSM_SLOTS_PREFIX "slots."
/* The most sequences a batched program advances together. */
#define SSM_MAX_SLOTS 256
/* The architecture's name (from the YAML) and a bound integer parameter
 * (e.g. "vocab"); returns 0 if absent. */
const char *ssm_model_arch(const ssm_model *m);
/* config.json's eos_token_id (the first, when it is a list), or -1. */
int64_t ssm_model_eos(const ssm_model *m);
int ssm_model_param(const ssm_model *m, const char *name, int64_t *out);
/* Sets a param before building: the built-in `max_seq` (the rows of a KV
 * cache, 1..2^24; default 2048) or any param of the description (as an
 * integer). An unknown name is an error. */
ssm_status ssm_model_set_param(ssm_model *m, const char *name, int64_t v);

/* A digest of everything a compiled model depends on from the model side:
 * the description's text, the config (as parsed, so whitespace does not
 * count) and every param as bound or set (max_seq included). Equal digests
 * compile to the same bundle with the same compiler and options. */
uint64_t ssm_model_digest(const ssm_model *m);

/* What the model depends on in config.json, as the text of one JSON
 * object (malloc'd): each key its params read (dotted as the description
 * writes it) with its value there, null for a key that was absent (its
 * param took a default), and model_type. A runtime compares it with the
 * config.json of the weights a compiled model is given. */
ssm_status ssm_model_config_used(const ssm_model *m, char **out_json);

/* Architecture YAMLs compiled into the binary (models/<name>.yaml), so the tool
 * works from any directory. Returns NULL if `file` (e.g. "mamba1.yaml") is
 * not embedded. */
const char *ssm_models_embedded(const char *file);
/* The file name of the i-th embedded YAML ("mamba1.yaml"), in sorted order;
 * NULL when i is out of range. */
const char *ssm_models_embedded_name(int i);

#endif
