/*
 * files.c — the command line's dealings with files that are not the
 * library's: text from stdin or a file, checking that an output can be
 * written before the work that makes it, and refusing an output that would
 * overwrite one of the command's own inputs (a bundle's among them: the
 * weights directory it records and the weights file beside it).
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "bundle/bundle.h"
#include "cli/cli.h"

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

#define MAX_STDIN ((size_t)64 << 20)

/* TEXT, or all of stdin for "-" (at most 64 MiB), into *out (malloc'd). */
ssm_status ssm_cli_text_arg(const char *what, const char *text, char **out, size_t *out_len) {
  if (strcmp(text, "-")) {
    *out_len = strlen(text);
    *out = strdup(text);
    return *out ? NULL : ssm_status_new(SSM_ERR_NOMEM, "%s: out of memory", what);
  }
  ssm_sb b = {0};
  char chunk[65536];
  size_t r;
  while ((r = fread(chunk, 1, sizeof chunk, stdin)) > 0) {
    if (b.n + r > MAX_STDIN) {
      ssm_sb_free(&b);
      return ssm_status_new(SSM_ERR_INVALID, "%s -: standard input is larger than 64 MiB", what);
    }
    ssm_sb_append(&b, chunk, r);
  }
  *out_len = b.n;
  return ssm_sb_take(&b, what, out);
}

ssm_status ssm_cli_text_file(const char *what, const char *path, char **out, size_t *out_len) {
  if (!strcmp(path, "-")) return ssm_cli_text_arg(what, path, out, out_len);
  return ssm_status_wrap(ssm_file_read(path, MAX_STDIN, out, out_len), "%s", what);
}

ssm_status ssm_cli_readable(const char *what, const char *path) {
  if (!strcmp(path, "-")) return NULL;
  int fd;
  size_t size;
  ssm_status s = ssm_file_open(path, &fd, &size);
  if (!s) close(fd);
  return ssm_status_wrap(s, "%s", what);
}

ssm_status ssm_cli_writable(const char *what, const char *path) {
  struct stat sb;
  if (!stat(path, &sb) && S_ISDIR(sb.st_mode))
    return ssm_status_new(SSM_ERR_INVALID, "%s %s: is a directory (expected a file name)", what,
                          path);
  char *tmp;
  int fd;
  SSM_TRY(ssm_status_wrap(ssm_file_temp(path, &tmp, &fd), "%s", what));
  ssm_status_free(ssm_file_commit(tmp, fd, path, 1)); /* removed: nothing written */
  return NULL;
}

ssm_status ssm_cli_bundle_inputs(const char *model, char **out_dir, char **out_file) {
  *out_dir = NULL;
  *out_file = NULL;
  int fd;
  size_t size;
  ssm_status s = ssm_file_open(model, &fd, &size);
  if (s) { /* not a file, or unreadable: said when the run opens it */
    ssm_status_free(s);
    return NULL;
  }
  char magic[4];
  int bundle = size >= 4 && read(fd, magic, 4) == 4 && !memcmp(magic, "SSMB", 4);
  close(fd);
  ssm_bundle *b = NULL;
  s = bundle ? ssm_bundle_open(model, &b) : NULL;
  if (s) { /* damaged: said when the run opens it */
    ssm_status_free(s);
    return NULL;
  }
  const ssm_manifest *m = b ? ssm_bundle_manifest(b) : NULL;
  if (m && m->source_dir) s = ssm_strdup(m->source_dir, "the bundle's weights directory", out_dir);
  if (!s && m && m->weights_file) {
    const char *slash = strrchr(model, '/');
    ssm_sb p = {0};
    if (slash) ssm_sb_printf(&p, "%.*s/%s", (int)(slash - model), model, m->weights_file);
    else ssm_sb_printf(&p, "%s", m->weights_file);
    s = ssm_sb_take(&p, "the bundle's weights file", out_file);
  }
  ssm_bundle_close(b);
  return s;
}

/* Refuses an output path that names a file the command reads: one of the
 * `n` inputs (NULL: an option not given), or a .json or .safetensors file
 * in the weights directory. */
ssm_status ssm_cli_not_an_input(const char *what, const char *out, const char *const *inputs,
                               size_t n, const char *weights) {
  for (size_t i = 0; out && i < n; i++)
    if (inputs[i] && ssm_file_same(out, inputs[i]))
      return ssm_status_new(SSM_ERR_INVALID, "%s %s: that is %s, an input of this command",
                            what, out, inputs[i]);
  DIR *d = out && weights ? opendir(weights) : NULL;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!ends_with(e->d_name, ".json") && !ends_with(e->d_name, ".safetensors")) continue;
    ssm_sb p = {0};
    ssm_sb_printf(&p, "%s/%s", weights, e->d_name);
    int same = ssm_file_same(out, p.s);
    ssm_sb_free(&p);
    if (same) {
      closedir(d);
      return ssm_status_new(SSM_ERR_INVALID, "%s %s: that is a file of the weights directory "
                            "%s, an input of this command", what, out, weights);
    }
  }
  if (d) closedir(d);
  return NULL;
}
