/*
 * stop.c — stop strings: where generated text ends at the first of a few
 * strings (ssmc run --stop, the chat's end of turn, the server's `stop`
 * field), and how much of it can be shown while more may still come
 * without showing the start of one.
 */
#include <string.h>

#include "runtime/ssmc.h"

size_t ssmc_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
                      int n) {
  size_t best = len;
  for (int i = 0; i < n; i++) {
    size_t k = strlen(stops[i]);
    size_t start = from >= k ? from - k + 1 : 0;
    if (!k || start >= len) continue;
    const char *hit = memmem(text + start, len - start, stops[i], k);
    if (hit && (size_t)(hit - text) < best) best = (size_t)(hit - text);
  }
  return best;
}

size_t ssmc_stop_safe(const char *text, size_t len, const char *const *stops, int n) {
  size_t safe = len;
  for (int i = 0; i < n; i++) {
    size_t k = strlen(stops[i]);
    for (k = k && k - 1 < len ? k - 1 : len; k > 0; k--)
      if (!memcmp(text + len - k, stops[i], k)) {
        if (len - k < safe) safe = len - k;
        break;
      }
  }
  return safe;
}
