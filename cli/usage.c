/*
 * usage.c — what the commands of ssmc say to the user when they are not
 * run: the usage texts of ssmc and of each command (printed for --help,
 * and after a usage error), and the two ways a command ends in failure,
 * an error of its work (ssm_cli_fail) and a mistake on its command line
 * (ssm_cli_usage_error). The bottom of cli/: option reading (opts.c) and
 * the commands build on it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: ssmc COMMAND [OPTIONS]        (ssmc COMMAND --help: its options)\n"
    "\n"
    "  run MODEL_DIR --prompt TEXT      generate text (compiled once, then cached)\n"
    "  compile MODEL -o OUT.ssmb        compile a model into a kernel bundle\n"
    "  bench MODEL_DIR|BUNDLE           time decode and prefill\n"
    "  perplexity MODEL --file TEXT     how well the model predicts a text\n"
    "  inspect BUNDLE                   a bundle's kernels, buffers and programs\n"
    "  ir MODEL                         the op IR, after any pass\n"
    "  tokenize --tokenizer DIR TEXT    text to tokens, and back (--decode)\n"
    "  serve MODEL_DIR|BUNDLE           an OpenAI-compatible HTTP server\n"
    "  export-web BUNDLE -o DIR         a static site running the bundle on WebGPU\n"
    "  devices                          the Vulkan devices\n"
    "  version, --version               the version and git revision\n"
    "  help [COMMAND]                   this, or a command's options\n"
    "\n"
    "MODEL: a Hugging Face model directory (config.json, model.safetensors), an\n"
    "architecture YAML with --config config.json, or (ir) an IR text file .ssmir.\n";

static const char usage_run[] =
    "usage: ssmc run MODEL (PROMPT | --prompt TEXT | --prompt-file FILE | --tokens IDS | -i)\n"
    "                [OPTIONS]\n"
    "\n"
    "MODEL: a Hugging Face model directory (compiled on first use, then read from\n"
    "the compile cache, $XDG_CACHE_HOME/ssmc or ~/.cache/ssmc), an architecture YAML\n"
    "with --config and --weights, or a bundle from `ssmc compile` (which records its\n"
    "weights directory).\n"
    "\n"
    "input:\n"
    "  PROMPT, -p, --prompt TEXT\n"
    "                       text to continue ('-': standard input)\n"
    "  --prompt-file FILE   the text to continue, from a file\n"
    "  --tokens 1,2,3       token ids; the last line of stdout is then the generated ids\n"
    "  -i, --interactive    turns from standard input, a line each, the state kept\n"
    "                       between them (after --prompt, when given); on a terminal\n"
    "                       a chat with line editing, history and /help\n"
    "  --chat-template FILE the chat's Jinja template instead of the model's\n"
    "generation:\n"
    "  -n N                 tokens to generate per prompt or turn (default 16)\n"
    "  --greedy             take the argmax on the host, every step\n"
    "  --temperature T      sample on the device (T > 0), shaped by --top-k K,\n"
    "                       --top-p P, --min-p M and --seed S\n"
    "  --repeat-penalty P   divide the positive logits of tokens already in the\n"
    "                       sequence by P, multiply the negative ones (1: off)\n"
    "  --eos ID             the end-of-text id (default: config.json's eos_token_id)\n"
    "  --stop STR           end the text before STR (up to 4 times; text output only)\n"
    "model:\n"
    "  --weights DIR        the checkpoint (default: MODEL, or the bundle's)\n"
    "  --config FILE        config.json of an architecture YAML\n"
    "  --tokenizer PATH     tokenizer.json or its directory (default: the weights')\n"
    "  --backend B          auto (default): the faster of the two for this machine and\n"
    "                       model; vulkan: the GPU (or lavapipe); cpu: the reference\n"
    "                       interpreter\n"
    "  --device N           the Vulkan device (see `ssmc devices`)\n"
    "  --validate           run under VK_LAYER_KHRONOS_validation\n"
    CHUNK_USAGE
    "  --max-seq N          positions a KV cache holds (default 2048)\n"
    "  --dtype D            f32, f16, bf16, q8_0 or q4_0: how matmul and embedding\n"
    "                       weights are kept (default: the checkpoint's own)\n"
    "  --no-cache           compile anew, without reading or writing the cache\n"
    "files:\n"
    "  --state-in FILE      start from a saved state\n"
    "  --state-out FILE     save the state at the end\n"
    "  --dump-logits FILE   the logits of every position, rows of vocab f32\n"
    "output:\n"
    "  -q, --quiet          no progress bar and no timing summary on stderr\n"
    "  --json               the timing summary as one line of JSON on stderr\n";

static const char usage_compile[] =
    "usage: ssmc compile MODEL -o OUT.ssmb [OPTIONS]\n"
    "\n"
    "MODEL: a Hugging Face model directory, or an architecture YAML with --config.\n"
    "  -o FILE              the bundle to write\n"
    "  --config FILE        config.json of an architecture YAML\n"
    "  --weights DIR        the weights directory to record in the bundle (default:\n"
    "                       MODEL when it is one), so that `ssmc run OUT.ssmb` finds it\n"
    CHUNK_USAGE
    "  --max-seq N          positions a KV cache holds (default 2048)\n"
    "  --dtype D            f32, f16, bf16, q8_0 or q4_0: how matmul and embedding\n"
    "                       weights are kept (default: the checkpoint's own;\n"
    "                       activations and state are f32)\n"
    "  --slots B            also a batched decode program that advances B sequences\n"
    "                       by one token each, reading each weight once (ssmc bench\n"
    "                       --batch; models without attention)\n"
    "  --no-fuse            every op a kernel of its own\n"
    "  --dump-ir DIR        the IR after every pass, of every program\n"
    "  --wgsl-window BYTES  storage window of WGSL slots and of tensors Vulkan kernels\n"
    "                       read in pieces (default 128 MiB; smaller: tests)\n"
    "  -q, --quiet          no progress bar\n";

static const char usage_ir[] =
    "usage: ssmc ir MODEL [OPTIONS]\n"
    "\n"
    "MODEL: a Hugging Face model directory, an architecture YAML with --config, or an\n"
    "IR text file (.ssmir), parsed, verified and printed back.\n"
    "  --config FILE        config.json of an architecture YAML\n"
    "  --seq T              the graph that processes T tokens (default 1: decode)\n"
    "  --batch B            the batched graph: B sequences of one token each\n"
    "  --max-seq N          positions a KV cache holds (default 2048)\n"
    "  --after PASS|all     the IR after a pass: verify, infer, simplify, weights,\n"
    "                       fuse, plan_buffers, schedule (or after each)\n"
    "  --dtype D            the weights pass's dtype for matmul and embedding weights:\n"
    "                       f32, f16, bf16, q8_0 or q4_0\n";

static const char usage_inspect[] =
    "usage: ssmc inspect BUNDLE [--json]\n"
    "\n"
    "A bundle's kernels (with the ops fused into each), buffers, weights, state and\n"
    "programs; --json: one JSON object (programs.decode.dispatches, planned bytes...).\n";

static const char usage_bench[] =
    "usage: ssmc bench MODEL_DIR|BUNDLE [OPTIONS]\n"
    "\n"
    "Times decode (logits to the host, and the token fed back on the device) and\n"
    "prefill on Vulkan. Takes the model options of `ssmc run` (--weights, --device...).\n"
    "  -n N                 decode tokens to time (default 128)\n"
    "  --reps N             repeat N times: means and standard deviations\n"
    "  --json               one JSON object (with device, dtype, version, git revision)\n"
    "  --profile            GPU time of every dispatch, by kernel family and op group\n"
    "  --batch B            instead: the batched decode program's aggregate tokens/s,\n"
    "                       B sequences stepping together, N steps (a bundle compiled\n"
    "                       with --slots B)\n"
    "  -q, --quiet          no progress bar\n";

static const char usage_perplexity[] =
    "usage: ssmc perplexity MODEL_DIR|BUNDLE (--file TEXT | --tokens IDS) [OPTIONS]\n"
    "\n"
    "Feeds the text from a fresh state as one sequence and prints the perplexity,\n"
    "exp of the mean -log p(token | the tokens before it), over every token but the\n"
    "first. Takes the model options of `ssmc run` (--weights, --dtype, --backend...);\n"
    "a model with attention needs --max-seq of at least the text's length.\n"
    "  --file TEXT          the text ('-': standard input), through the tokenizer\n"
    "  --tokens 1,2,3       token ids instead\n"
    "  --tokenizer PATH     tokenizer.json or its directory (default: the weights')\n"
    "  --json               one JSON object: perplexity, nll (the mean), tokens, dtype\n"
    "  -q, --quiet          no progress bar and no timing summary on stderr\n";

static const char usage_tokenize[] =
    "usage: ssmc tokenize --tokenizer PATH (TEXT | - | --decode IDS) [--ids]\n"
    "\n"
    "PATH: a tokenizer.json or the directory that holds it. Prints one token a line,\n"
    "`ID -> 'PIECE'` (escaped: \\n, \\t, \\xNN for bytes that are not whole\n"
    "characters); '-' reads the text from standard input.\n"
    "  --ids                the ids only, comma-separated\n"
    "  --decode 1,2,3       the text of these ids\n";

static const char usage_export[] =
    "usage: ssmc export-web BUNDLE [--weights DIR] -o OUTDIR [--tokenizer FILE] [--link-weights]\n"
    "\n"
    "A static site that runs the bundle in a browser on WebGPU (index.html, the host,\n"
    "the kernels, the tokenizer, and the weights copied or, with --link-weights, linked).\n"
    "--weights defaults to the weights directory the bundle records.\n";

static const char usage_devices[] =
    "usage: ssmc devices\n"
    "\n"
    "The Vulkan devices, the default one marked '*' (a discrete GPU first).\n";

static const struct {
  const char *name;
  const char *usage;
} usages[] = {{"run", usage_run},
              {"compile", usage_compile},
              {"bench", usage_bench},
              {"perplexity", usage_perplexity},
              {"inspect", usage_inspect},
              {"ir", usage_ir},
              {"tokenize", usage_tokenize},
              {"devices", usage_devices},
              {"export-web", usage_export},
              {"serve", "usage: ssmc serve MODEL_DIR|BUNDLE [options]   (ssmc serve --help)\n"}};

const char *ssm_cli_usage(const char *cmd) {
  for (size_t i = 0; cmd && i < sizeof usages / sizeof usages[0]; i++)
    if (!strcmp(cmd, usages[i].name)) return usages[i].usage;
  return usage;
}

int ssm_cli_fail(ssmc_status s) {
  if (ssmc_status_code(s) == SSMC_ERR_CANCELLED && ssm_cli_signal) {
    fprintf(stderr, "ssmc: interrupted\n");
    ssmc_status_free(s);
    return 128 + ssm_cli_signal;
  }
  fprintf(stderr, "ssmc: %s\n", ssmc_status_message(s));
  ssmc_status_free(s);
  return 1;
}

int ssm_cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ssmc: %s%s", cmd ? cmd : "", cmd ? ": " : "");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (cmd) fprintf(stderr, "\nTry 'ssmc %s --help'.\n", cmd);
  else fprintf(stderr, "\nTry 'ssmc --help'.\n");
  return 2;
}

/* Levenshtein distance of `a` and `b`, up to 31 bytes of each */
size_t ssm_cli_edits(const char *a, const char *b) {
  size_t na = strnlen(a, 31), nb = strnlen(b, 31), row[32];
  for (size_t j = 0; j <= nb; j++) row[j] = j;
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}
