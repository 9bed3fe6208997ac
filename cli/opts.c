/*
 * opts.c — reading a command's options with getopt_long: one table per
 * command (cli.h: opt), `--name VALUE` and `--name=VALUE` (and `-n VALUE`,
 * `-nVALUE` for one-letter names), options and the positional argument in
 * any order, `--` before a positional that starts with a dash, and
 * `--help`/`-h` for every command. Numbers are checked against their range
 * with a message that names the option; unknown options and missing values
 * name the option and the command.
 */
#include <errno.h>
#include <getopt.h>
#include <string.h>

#include "cli/cli.h"

/* The option a getopt_long value stands for: 256 + its index. */
#define LONG_BASE 256
#define MAX_OPTS 64

static int set_value(const char *cmd, const opt *o, const char *v) {
  if (o->kind == LIST) {
    if (*o->given >= (int)o->hi)
      return ssm_cli_usage_error(cmd, "%s: given more than %d times (at '%s')", o->name, (int)o->hi, v);
    ((const char **)o->dest)[(*o->given)++] = v;
    return 0;
  }
  if (o->given) *o->given = 1;
  if (o->kind == FLAG) {
    *(int *)o->dest = 1;
    return 0;
  }
  if (o->kind == STR) {
    *(const char **)o->dest = v;
    return 0;
  }
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (!*v || *end || errno || !(d >= o->lo && d <= o->hi) || (o->open && d == o->lo) ||
      (o->kind == INT && d != (double)(long)d))
    return ssm_cli_usage_error(cmd, "%s: expected %s, got '%s'", o->name, o->what, v);
  if (o->kind == INT) *(long *)o->dest = (long)d;
  else *(double *)o->dest = d;
  return 0;
}

/* The option of `opts` (or --help) nearest to unknown option `arg` (its
 * name before any '='), at most 2 edits away; NULL if none is. */
static const char *nearest_option(const opt *opts, const char *arg) {
  char name[32];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
  const char *best = NULL;
  size_t least = 3;
  for (int k = 0;; k++) {
    const char *o = opts[k].name ? opts[k].name : "--help";
    size_t d = ssm_cli_edits(name, o);
    if (d < least && d + 1 < strlen(name)) {
      least = d;
      best = o;
    }
    if (!opts[k].name) return best;
  }
}

int ssm_cli_parse(const char *cmd, int argc, char **argv, const opt *opts, const char **pos) {
  return ssm_cli_parse2(cmd, argc, argv, opts, pos, NULL);
}

int ssm_cli_parse2(const char *cmd, int argc, char **argv, const opt *opts, const char **pos,
                   const char **pos2) {
  struct option longs[MAX_OPTS + 2];
  char shorts[3 * MAX_OPTS + 4] = ":h";
  int n = 0, nl = 0;
  size_t ns = 2;
  for (; opts[n].name; n++) {
    SSM_ASSERT(n < MAX_OPTS && opts[n].name[0] == '-');
    const char *name = opts[n].name;
    int arg = opts[n].kind == FLAG ? no_argument : required_argument;
    if (name[1] == '-') {
      longs[nl++] = (struct option){name + 2, arg, NULL, LONG_BASE + n};
    } else {
      SSM_ASSERT(name[1] && !name[2]);
      shorts[ns++] = name[1];
      if (arg == required_argument) shorts[ns++] = ':';
    }
  }
  longs[nl++] = (struct option){"help", no_argument, NULL, 'h'};
  longs[nl] = (struct option){0};
  shorts[ns] = 0;
  /* argv[0] is the command's name for getopt, which starts at argv[1] */
  char **args;
  ssm_status as = ssm_alloc((size_t)argc + 2, sizeof *args, (void **)&args);
  if (as) return ssm_cli_fail(ssm_status_wrap(as, "the command line"));
  args[0] = (char *)cmd;
  for (int i = 0; i < argc; i++) args[i + 1] = argv[i];
  int rc = 0, c, index;
  optind = 0; /* a full reinitialization (GNU) */
  opterr = 0;
  while (!rc && (c = getopt_long(argc + 1, args, shorts, longs, &index)) != -1) {
    const opt *o = NULL;
    if (c >= LONG_BASE) o = &opts[c - LONG_BASE];
    for (int k = 0; k < n && !o && c > 0 && c < LONG_BASE; k++)
      if (opts[k].name[1] == c && !opts[k].name[2]) o = &opts[k];
    if (c == 'h' && !o) {
      fputs(ssm_cli_usage(cmd), stdout);
      rc = -1;
    } else if (c == '?' || c == ':') {
      const opt *bad = optopt >= LONG_BASE ? &opts[optopt - LONG_BASE] : NULL;
      for (int k = 0; k < n && !bad && optopt; k++)
        if (opts[k].name[1] == optopt && !opts[k].name[2]) bad = &opts[k];
      if (c == ':')
        rc = ssm_cli_usage_error(cmd, "option '%s' needs a value",
                                 bad ? bad->name : args[optind - 1]);
      else if (bad)
        rc = ssm_cli_usage_error(cmd, "option '%s' takes no value", bad->name);
      else if (optopt)
        rc = ssm_cli_usage_error(cmd, "unknown option '-%c'", optopt);
      else if (nearest_option(opts, args[optind - 1]))
        rc = ssm_cli_usage_error(cmd, "unknown option '%s' (did you mean '%s'?)", args[optind - 1],
                                 nearest_option(opts, args[optind - 1]));
      else
        rc = ssm_cli_usage_error(cmd, "unknown option '%s'", args[optind - 1]);
    } else {
      SSM_ASSERT(o);
      rc = set_value(cmd, o, optarg);
    }
  }
  for (int i = optind; !rc && i <= argc; i++) {
    if (pos && !*pos) *pos = args[i];
    else if (pos2 && !*pos2) *pos2 = args[i];
    else rc = ssm_cli_usage_error(cmd, "unexpected argument '%s'", args[i]);
  }
  free(args);
  return rc < 0 ? -1 : rc;
}
