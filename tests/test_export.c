/*
 * test_export.c — `ssmc export-web`: the site it writes (the page, the
 * host's modules, the bundle, the tokenizer, the weights copied or linked,
 * site.json), and the clear errors, written before any file, for a bad
 * bundle, a missing tokenizer, weights that are not the bundle's, and an
 * output that is not a directory or that names an input (the weights'
 * own directory); a write that fails keeps the old site.
 * The page itself runs in runtime/web/test/browser.test.mjs.
 */
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#define FIX "tests/data/mamba1_tiny"
#define TOK "tests/data/tokenizer/neox/tokenizer.json"

/* Runs `ssmc ARGS` in the source dir; asserts the exit status and that the
 * output contains `needle`. */
static void expect(const char *args, int want_rc, const char *needle) {
  char cmd[4096], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s %s", ssm_test_source_dir(), ssm_test_ssmc(), args);
  int rc = ssm_test_sh(cmd, &out);
  if (rc != want_rc || !strstr(out, needle))
    fprintf(stderr, "\n  ssmc %s\n  -> exit %d (want %d), output:\n%s\n  (want '%s')\n", args, rc,
            want_rc, out, needle);
  CU_ASSERT_EQUAL(rc, want_rc);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, needle));
  free(out);
}

static const char *bundle(const char *fixture) {
  static char path[600];
  snprintf(path, sizeof path, "%s/%s.ssmb", ssm_test_tmpdir(), fixture);
  char args[1200];
  snprintf(args, sizeof args, "compile tests/data/%s --chunk 4 -o %s", fixture, path);
  expect(args, 0, "");
  return path;
}

static int is_file(const char *dir, const char *name, int link) {
  char p[1200];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return !lstat(p, &st) && (link ? S_ISLNK(st.st_mode) : S_ISREG(st.st_mode)) && !stat(p, &st) &&
         st.st_size > 0;
}

/* A sharded f16 checkpoint: the index and its three shards go with the
 * site, copied or linked; site.json names them and the end-of-text id. */
static void test_site(void) {
  const char *b = bundle("mamba1_f16_sharded");
  char out[600], args[2000];
  for (int link = 0; link < 2; link++) {
    snprintf(out, sizeof out, "%s/site%d", ssm_test_tmpdir(), link);
    snprintf(args, sizeof args, "export-web %s --weights tests/data/mamba1_f16_sharded --tokenizer "
             TOK " -o %s%s", b, out, link ? " --link-weights" : "");
    expect(args, 0, "index.html over http");
    static const char *const files[] = {"index.html", "page.mjs", "bundle.mjs", "gpu.mjs",
                                        "session.mjs", "safetensors.mjs", "tokenizer.mjs",
                                        "transform.mjs", "json.mjs", "genconfig.mjs", "model.ssmb",
                                        "tokenizer.json", "site.json", NULL};
    for (int i = 0; files[i]; i++) {
      if (!is_file(out, files[i], 0)) fprintf(stderr, "\n  %s/%s is missing\n", out, files[i]);
      CU_ASSERT(is_file(out, files[i], 0));
    }
    CU_ASSERT(!is_file(out, "ssmc-web.mjs", 0) && !is_file(out, "node.mjs", 0));
    char *text;
    size_t n;
    char p[1200];
    snprintf(p, sizeof p, "%s/site.json", out);
    SSM_ASSERT_OK(ssm_file_read(p, 0, &text, &n));
    cJSON *j = cJSON_Parse(text);
    const cJSON *w = cJSON_GetObjectItem(j, "weights");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(w), 4);
    for (int i = 0; i < cJSON_GetArraySize(w); i++)
      CU_ASSERT(is_file(out, cJSON_GetArrayItem(w, i)->valuestring, link));
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(w, 0)->valuestring, "model.safetensors.index.json");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "eos")->valueint, 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "bundle")->valuestring, "model.ssmb");
    cJSON_Delete(j);
    free(text);
    /* no temporary file left behind */
    char cmd[1300], *ls;
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -c tmp-", out);
    ssm_test_sh(cmd, &ls);
    CU_ASSERT_STRING_EQUAL(ls, "0\n");
    free(ls);
  }
  /* again over the same site: it is rewritten */
  expect(args, 0, "index.html over http");
}

/* A quantized bundle's site ships its weights file as the checkpoint (the
 * file's bytes, the only weights named), not the float checkpoint. */
static void test_quantized_site(void) {
  char b[600], out[600], args[4200];
  snprintf(b, sizeof b, "%s/q8site.ssmb", ssm_test_tmpdir());
  snprintf(out, sizeof out, "%s/q8site", ssm_test_tmpdir());
  snprintf(args, sizeof args, "compile tests/data/mamba1_tiny --dtype q8_0 -q -o %s && %s export-web "
           "%s --weights tests/data/mamba1_tiny --tokenizer " TOK " -o %s && cmp %s/q8site.q8_0.safetensors "
           "%s/model.safetensors && tr -d ' \t\n' <%s/site.json", b, ssm_test_ssmc(), b, out,
           ssm_test_tmpdir(), out, out);
  expect(args, 0, "\"weights\":[\"model.safetensors\"]");
  /* without --weights: the directory the bundle records, the same site */
  char out2[700];
  snprintf(out2, sizeof out2, "%s/q8site_rec", ssm_test_tmpdir());
  snprintf(args, sizeof args, "export-web %s --tokenizer " TOK " -o %s && cmp %s/model.safetensors "
           "%s/model.safetensors && cmp %s/site.json %s/site.json && echo same", b, out2, out, out2, out,
           out2);
  expect(args, 0, "same");
}

/* The weights directory's generation_config.json goes into site.json as
 * it is, for the page's defaults; a malformed one fails the export, naming
 * the field, before anything is written. */
static void test_generation_config(void) {
  const char *b = bundle("mamba1_tiny");
  char w[600], out[700], cmd[3000], *text;
  snprintf(w, sizeof w, "%s/gen", ssm_test_tmpdir());
  snprintf(out, sizeof out, "%s/gensite", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "cd %s && mkdir -p %s && cp " FIX "/config.json " FIX "/model.safetensors %s/ "
           "&& echo '{\"do_sample\": true, \"temperature\": 0.7, \"eos_token_id\": [0, 5], \"x\": {}}' "
           "> %s/generation_config.json", ssm_test_source_dir(), w, w, w);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  char args[2600];
  snprintf(args, sizeof args, "export-web %s --weights %s --tokenizer " TOK " -o %s", b, w, out);
  expect(args, 0, "index.html over http");
  snprintf(cmd, sizeof cmd, "%s/site.json", out);
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(cmd, 0, &text, &n));
  cJSON *j = cJSON_Parse(text);
  const cJSON *g = cJSON_GetObjectItem(j, "generation_config");
  CU_ASSERT(cJSON_IsTrue(cJSON_GetObjectItem(g, "do_sample")));
  CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(g, "temperature")->valuedouble, 0.7, 1e-12);
  CU_ASSERT_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "eos_token_id"), 1)->valueint, 5);
  cJSON_Delete(j);
  free(text);
  CU_ASSERT(is_file(out, "genconfig.mjs", 0));
  snprintf(cmd, sizeof cmd, "echo '{\"top_p\": 0}' > %s/generation_config.json", w);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  snprintf(args, sizeof args, "export-web %s --weights %s --tokenizer " TOK " -o %s2", b, w, out);
  expect(args, 1, "/gen/generation_config.json: top_p: expected a number above 0 to 1");
  struct stat st;
  snprintf(cmd, sizeof cmd, "%s2", out);
  CU_ASSERT(stat(cmd, &st) != 0);
}

static void test_errors(void) {
  const char *b = bundle("mamba1_tiny");
  char args[2000], out[600];
  snprintf(out, sizeof out, "%s/bad", ssm_test_tmpdir());
  expect("export-web", 2, "export-web: missing BUNDLE");
  /* a bundle compiled from its description alone records no weights */
  snprintf(args, sizeof args, "compile models/mamba1.yaml --config " FIX "/config.json -q -o %s/bare.ssmb "
           "&& %s export-web %s/bare.ssmb -o %s", ssm_test_tmpdir(), ssm_test_ssmc(), ssm_test_tmpdir(), out);
  expect(args, 2, "export-web: missing --weights DIR (");
  snprintf(args, sizeof args, "export-web %s --weights " FIX, b);
  expect(args, 2, "export-web: missing -o OUTDIR");
  snprintf(args, sizeof args, "export-web " FIX "/config.json --weights " FIX " -o %s", out);
  expect(args, 1, "not an ssmc bundle");
  /* the fixtures have no tokenizer.json */
  snprintf(args, sizeof args, "export-web %s --weights " FIX " -o %s", b, out);
  expect(args, 1, "export-web needs the tokenizer for the page's text (--tokenizer FILE, or "
         "tokenizer.json in --weights)");
  /* another model's weights: its config.json says so; without one, its tensors */
  snprintf(args, sizeof args, "export-web %s --weights tests/data/mamba1_untied --tokenizer " TOK
           " -o %s", b, out);
  expect(args, 1, "tests/data/mamba1_untied/config.json differs from the config it was "
         "compiled with (vocab_size is 757, not 1000;");
  char w[600], cmd[2600];
  snprintf(w, sizeof w, "%s/bare", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "cd %s && mkdir -p %s/untied %s/jamba && cp tests/data/mamba1_untied/"
           "model.safetensors %s/untied/ && cp tests/data/jamba_tiny/model.safetensors %s/jamba/",
           ssm_test_source_dir(), w, w, w, w);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  snprintf(args, sizeof args, "export-web %s --weights %s/untied --tokenizer " TOK " -o %s", b,
           w, out);
  expect(args, 1, "/untied: tensor 'backbone.embeddings.weight' has shape [757,48] in the "
         "checkpoint but the model expects [1000,64]");
  snprintf(args, sizeof args, "export-web %s --weights %s/jamba --tokenizer " TOK " -o %s", b, w,
           out);
  expect(args, 1, "tensor 'backbone.embeddings.weight' not found in ");
  /* nothing was written for any of them */
  struct stat st;
  CU_ASSERT(stat(out, &st) != 0);
  const char *file = ssm_test_write("plain", "x", 1);
  snprintf(args, sizeof args, "export-web %s --weights " FIX " --tokenizer " TOK " -o %s", b, file);
  expect(args, 1, "exists and is not a directory");
}

/* A write that fails half-way (the file-size limit, inherited by ssmc)
 * leaves the site's files as they were. */
static void test_failed_write_keeps_the_site(void) {
  const char *b = bundle("mamba1_tiny");
  char args[2000], out[600], weights[700];
  snprintf(out, sizeof out, "%s/keep", ssm_test_tmpdir());
  snprintf(args, sizeof args, "export-web %s --weights " FIX " --tokenizer " TOK " -o %s", b, out);
  expect(args, 0, "index.html");
  snprintf(weights, sizeof weights, "%s/model.safetensors", out);
  FILE *f = fopen(weights, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("old weights", f);
  fclose(f);
  /* a file size limit halfway between the bundle's and the weights' (520
   * KB): the bundle is written, the weights are not */
  struct stat bs, ws;
  CU_ASSERT_FATAL(!stat(b, &bs) && !stat(ssm_test_path(FIX "/model.safetensors"), &ws));
  CU_ASSERT_FATAL(bs.st_size < ws.st_size);
  ssm_test_limit_file_size(((size_t)bs.st_size + (size_t)ws.st_size) / 2);
  expect(args, 1, "model.safetensors: cannot write (File too large)");
  ssm_test_limit_file_size(0);
  char *text;
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(weights, 0, &text, &n));
  CU_ASSERT_STRING_EQUAL(text, "old weights");
  free(text);
}

/* An export into the weights' own directory is refused before anything is
 * written: with --link-weights it used to replace the checkpoint by a link
 * to itself. The checkpoint and tokenizer stay as they were. */
static void test_output_is_not_an_input(void) {
  const char *b = bundle("mamba1_tiny");
  char dir[600], cmd[4096], args[2000];
  snprintf(dir, sizeof dir, "%s/own", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "mkdir -p %s/keep && cd %s && cp " FIX "/config.json "
           FIX "/model.safetensors " TOK " %s/ && cp %s/model.safetensors %s/tokenizer.json "
           "%s/keep/", dir, ssm_test_source_dir(), dir, dir, dir, dir);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  for (int link = 0; link < 2; link++) {
    snprintf(args, sizeof args, "export-web %s --weights %s -o %s%s", b, dir, dir,
             link ? " --link-weights" : "");
    expect(args, 1, "an input of this command");
    /* naming the tokenizer elsewhere: the weights themselves */
    snprintf(args, sizeof args, "export-web %s --weights %s --tokenizer " TOK " -o %s%s", b, dir,
             dir, link ? " --link-weights" : "");
    expect(args, 1, "model.safetensors, an input of this command");
  }
  CU_ASSERT(is_file(dir, "model.safetensors", 0));
  CU_ASSERT(!is_file(dir, "index.html", 0));
  snprintf(cmd, sizeof cmd, "cd %s && cmp model.safetensors keep/model.safetensors && "
           "cmp tokenizer.json keep/tokenizer.json", dir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0);
}

/* A shard named as one of the site's own files (the page, site.json, the
 * bundle) would replace that file of the site, and one named by a path
 * would land outside it: refused, naming the shard, before anything is
 * written. */
static void test_shard_names(void) {
  const char *b = bundle("mamba1_f16_sharded");
  static const struct { const char *name, *why; } cases[] = {
      {"index.html", "has the name of one of the exported site's own files"},
      {"site.json", "has the name of one of the exported site's own files"},
      {"model.ssmb", "has the name of one of the exported site's own files"},
      {"../w.safetensors", "is not a file name in the checkpoint's directory"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char d[600], cmd[3000], args[2000], want[300], *out;
    snprintf(d, sizeof d, "%s/shard_names%zu", ssm_test_tmpdir(), i);
    snprintf(cmd, sizeof cmd, "cd %s && rm -rf %s && mkdir -p %s/sub && cp tests/data/mamba1_f16_sharded/* "
             "%s/sub && cd %s/sub && f=model-00001-of-00003.safetensors && mv $f %s && "
             "sed -i \"s|$f|%s|g\" model.safetensors.index.json", ssm_test_source_dir(), d, d, d, d,
             cases[i].name, cases[i].name);
    CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &out), 0);
    free(out);
    snprintf(args, sizeof args, "export-web %s --weights %s/sub --tokenizer " TOK " -o %s/site", b, d, d);
    snprintf(want, sizeof want, "model.safetensors.index.json: the shard '%s' %s", cases[i].name,
             cases[i].why);
    expect(args, 1, want);
    char site[700];
    snprintf(site, sizeof site, "%s/site", d);
    CU_ASSERT_EQUAL(access(site, F_OK), -1); /* nothing written */
  }
}

int main(void) {
  CU_TestInfo tests[] = {{"site", test_site}, {"quantized_site", test_quantized_site},
                         {"errors", test_errors},
                         {"generation_config", test_generation_config},
                         {"failed_write_keeps_the_site", test_failed_write_keeps_the_site},
                         {"output_is_not_an_input", test_output_is_not_an_input},
                         {"shard_names", test_shard_names},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("export", tests);
}
