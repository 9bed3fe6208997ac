/*
 * stop.c — printing generated text that ends at a stop string (run --stop,
 * the chat's end of turn): text is printed as it comes except a tail that
 * could still begin a stop string, held back until the next text says it
 * does not (runtime/stop.c does the matching, as for the server's `stop`).
 */
#include <string.h>

#include "cli/cli.h"

int ssm_cli_stop_add(ssm_cli_stopper *s, const char *text, size_t len) {
  if (s->hit) return 1;
  size_t from = s->text.n;
  ssm_sb_append(&s->text, text, len);
  if (s->text.failed) return 1;
  s->end = ssmc_stop_find(s->text.s, s->text.n, from, s->stops, s->nstops);
  s->hit = s->end < s->text.n;
  size_t safe = s->hit ? s->end : ssmc_stop_safe(s->text.s, s->text.n, s->stops, s->nstops);
  if (safe > s->shown) {
    fwrite(s->text.s + s->shown, 1, safe - s->shown, stdout);
    fflush(stdout);
    s->shown = safe;
  }
  return s->hit;
}

void ssm_cli_stop_end(ssm_cli_stopper *s) {
  if (s->end > s->shown) fwrite(s->text.s + s->shown, 1, s->end - s->shown, stdout);
  fflush(stdout);
  s->shown = s->end;
}

void ssm_cli_stop_clear(ssm_cli_stopper *s) {
  ssm_sb_clear(&s->text);
  s->end = s->shown = 0;
  s->hit = 0;
}
