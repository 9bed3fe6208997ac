/*
 * tokenize.c — `ssmc tokenize`: text to ids, printed one token a line
 * as `ID -> 'PIECE'` like llama-tokenize (the piece is the bytes the token
 * stands for, with quotes, backslashes, control characters and bytes that
 * are not whole UTF-8 characters escaped), or as the plain list with
 * --ids; and ids back to text with --decode.
 */
#include <locale.h>
#include <string.h>
#include <wchar.h>
#include <wctype.h>

#include "tokenizer/tokenizer.h"
#include "cli/cli.h"

/* Writes `n` bytes of a token's piece to `f`, escaped: printable UTF-8
 * characters as they are, \n \t \r \\ \' and \xNN for everything else.
 * UTF-8 is checked by the C library (mbrtowc in the C.UTF-8 locale); where
 * that locale is missing, every byte outside ASCII is escaped. */
static void put_piece(FILE *f, const char *s, size_t n, locale_t utf8) {
  locale_t old = utf8 ? uselocale(utf8) : (locale_t)0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\\' ? "\\\\"
                      : c == '\'' ? "\\'" : NULL;
    if (esc) {
      fputs(esc, f);
      i++;
      continue;
    }
    mbstate_t st = {0};
    wchar_t wc = 0;
    size_t k = c < 0x80 ? 1 : utf8 ? mbrtowc(&wc, s + i, n - i, &st) : (size_t)-1;
    if (c < 0x80) wc = c;
    if (k == 0 || k > n - i || !iswprint((wint_t)wc)) {
      fprintf(f, "\\x%02x", c);
      i++;
    } else {
      fwrite(s + i, 1, k, f);
      i += k;
    }
  }
  if (utf8) uselocale(old);
}

int ssm_cli_tokenize(int argc, char **argv) {
  const char *path = NULL, *text = NULL, *decode = NULL;
  int plain = 0;
  opt opts[] = {O_STR("--tokenizer", &path), O_STR("--decode", &decode), O_FLAG("--ids", &plain),
                {0}};
  SSM_CLI_PARSE("tokenize", argc, argv, opts, &text);
  if (!path) return ssm_cli_usage_error("tokenize", "missing --tokenizer FILE (a tokenizer.json "
                                        "or the directory that holds it)");
  if (!text == !decode) return ssm_cli_usage_error("tokenize", "give either TEXT or --decode IDS");
  ssmc_tokenizer *t;
  ssmc_status s = ssmc_tokenizer_open(path, &t);
  if (s) return ssm_cli_fail(s);
  int32_t *ids = NULL;
  size_t n = 0, len;
  char *out = NULL;
  if (decode) {
    s = ssm_cli_parse_ids("--decode", decode, &ids, &n);
    if (!s) s = ssmc_tokenizer_decode(t, ids, n, 0, &out, &len);
    if (!s) printf("%.*s\n", (int)len, out);
  } else {
    char *in = NULL;
    s = ssm_cli_text_arg("tokenize", text, &in, &len);
    if (!s) s = ssmc_tokenizer_encode(t, in, len, &ids, &n);
    locale_t utf8 = plain || s ? (locale_t)0 : newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    for (size_t i = 0; !s && i < n; i++) {
      if (plain) {
        printf(i ? ",%d" : "%d", ids[i]);
        continue;
      }
      size_t plen = 0;
      char *piece;
      if ((s = ssm_tok_piece(t, ids[i], &piece, &plen))) break;
      printf("%6d -> '", ids[i]);
      put_piece(stdout, piece, plen, utf8);
      printf("'\n");
      free(piece);
    }
    if (!s && plain) putchar('\n');
    if (utf8) freelocale(utf8);
    free(in);
  }
  free(out);
  free(ids);
  ssmc_tokenizer_close(t);
  return s ? ssm_cli_fail(s) : 0;
}
