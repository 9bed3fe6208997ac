/*
 * profile.c — printing `ssmc bench --profile`: each program's GPU time
 * per dispatch, and totals per kernel family (template) and per op group
 * (the fused ops of a kernel, without its knobs), with the bandwidth each
 * achieves on the bytes of its bindings.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
  char name[160];
  double us;
  uint64_t bytes;
  int n;
} total;

typedef SSM_VEC(total) totals;

/* Adds a step to the total named by `name` (its first `len` bytes). */
static void add(totals *v, const char *name, size_t len, const ssmc_profile_step *s) {
  size_t i = 0;
  while (i < v->n && (strlen(v->items[i].name) != len || strncmp(v->items[i].name, name, len))) i++;
  if (i == v->n) {
    total t = {.n = 0};
    snprintf(t.name, sizeof t.name, "%.*s", (int)(len < 159 ? len : 159), name);
    ssm_vec_xpush(v, t);
  }
  v->items[i].us += s->us;
  v->items[i].bytes += s->bytes;
  v->items[i].n++;
}

static double gbs(uint64_t bytes, double us) { return us > 0 ? (double)bytes / us * 1e-3 : 0; }

static void print_totals(FILE *f, const char *title, totals *v, double sum, int json) {
  if (json) fprintf(f, "\"%s\": [", title);
  else fprintf(f, "  %s:\n", title);
  for (size_t i = 0; i < v->n; i++) {
    const total *t = &v->items[i];
    if (json)
      fprintf(f, "%s{\"name\": \"%s\", \"dispatches\": %d, \"us\": %.3f, \"share\": %.4f, "
              "\"gb_per_s\": %.2f}", i ? ", " : "", t->name, t->n, t->us, sum > 0 ? t->us / sum : 0,
              gbs(t->bytes, t->us));
    else
      fprintf(f, "    %-28s %4d dispatches %10.1f us %5.1f%% %8.1f GB/s\n", t->name, t->n, t->us,
              sum > 0 ? 100 * t->us / sum : 0, gbs(t->bytes, t->us));
  }
  if (json) fprintf(f, "]");
}

void ssm_cli_print_profile(FILE *f, const char *program, const ssmc_profile_step *s, int n,
                           int runs, int json) {
  totals fam = {0}, grp = {0};
  double sum = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < n; i++) {
    add(&fam, s[i].family, strlen(s[i].family), &s[i]);
    add(&grp, s[i].op, strcspn(s[i].op, " "), &s[i]);
    sum += s[i].us;
    bytes += s[i].bytes;
  }
  if (json) {
    fprintf(f, "\"%s\": {\"runs\": %d, \"dispatches\": %d, \"us\": %.3f, \"gb_per_s\": %.2f, ",
            program, runs, n, sum, gbs(bytes, sum));
    print_totals(f, "families", &fam, sum, 1);
    fprintf(f, ", ");
    print_totals(f, "op_groups", &grp, sum, 1);
    fprintf(f, ", \"steps\": [");
    for (int i = 0; i < n; i++)
      fprintf(f, "%s{\"kernel\": \"%s\", \"op\": \"%s\", \"us\": %.3f, \"bytes\": %llu, "
              "\"gb_per_s\": %.2f}", i ? ", " : "", s[i].kernel, s[i].op, s[i].us,
              (unsigned long long)s[i].bytes, gbs(s[i].bytes, s[i].us));
    fprintf(f, "]}");
  } else {
    fprintf(f, "%s: %d dispatches, %.1f us of GPU time per run (mean of %d), %.1f GB/s over "
            "their bindings\n", program, n, sum, runs, gbs(bytes, sum));
    print_totals(f, "by kernel family", &fam, sum, 0);
    print_totals(f, "by op group", &grp, sum, 0);
    fprintf(f, "  dispatches:\n");
    for (int i = 0; i < n; i++)
      fprintf(f, "    %4d %-16s %9.2f us %8.1f GB/s  %s\n", i, s[i].kernel, s[i].us,
              gbs(s[i].bytes, s[i].us), s[i].op);
  }
  ssm_vec_free(&fam);
  ssm_vec_free(&grp);
}
