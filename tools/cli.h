/*
 * cli.h — what the files of the command line (tools/cli*.c) share.
 */
#ifndef SSM_CLI_H
#define SSM_CLI_H

#include <stdio.h>

#include "base/base.h"
#include "runtime/ssmc.h"

/* TEXT, or all of stdin for "-" (at most 64 MiB), into *out (malloc'd);
 * `what` names the option in messages. */
ssm_status ssm_cli_text_arg(const char *what, const char *text, char **out, size_t *out_len);
/* Refuses output path `out` (NULL: nothing to check) when it names a file
 * the command reads: one of the NULL-terminated `inputs`, or a .json or
 * .safetensors file of the `weights` directory. `what` names the option. */
ssm_status ssm_cli_not_an_input(const char *what, const char *out, const char *const *inputs,
                                const char *weights);

/* Prints a profiled program (`program`: "decode" or "prefill"), as text or
 * as one JSON member "program": {...} (cli_profile.c). */
void ssm_cli_print_profile(FILE *f, const char *program, const ssmc_profile_step *s, int n,
                           int runs, int json);

#endif
