/*
 * replay.c — runs a fuzz target over every file of its seed corpus, without
 * libFuzzer, so that every build (gcc, sanitizers) checks the corpora under
 * ctest: `replay_NAME tests/fuzz/corpus/NAME`. A broken property aborts, as
 * under the fuzzer; otherwise it prints how many inputs ran and exits 0
 * (1 when the directory holds none).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    perror(argv[1]);
    return 1;
  }
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    ssm_sb path = {0};
    ssm_sb_printf(&path, "%s/%s", argv[1], e->d_name);
    char *data;
    size_t size;
    ssm_status s = ssm_file_read(path.s, 0, &data, &size);
    if (s) {
      fprintf(stderr, "%s\n", ssm_status_message(s));
      return 1;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)data, size);
    free(data);
    ssm_sb_free(&path);
    n++;
  }
  closedir(d);
  printf("%s: %d inputs\n", argv[1], n);
  return n ? 0 : 1;
}
