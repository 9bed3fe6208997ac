/*
 * fuzz_chat.c — a chat template (chat/jinja.h): the input is the template's
 * text, parsed and, when it parses, rendered with a hostile context (odd
 * roles, contents of every JSON kind, tool calls, tools, documents, special
 * tokens) with and without add_generation_prompt. Whatever the template,
 * parse and render end, within their bounds, in text or an error that says
 * why: never a crash, a hang or unbounded memory.
 */
#include <cjson/cJSON.h>

#include "chat/jinja.h"
#include "fuzz.h"

static const char context[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"unk_token\": \"\", \"pad_token\": null,"
    " \"messages\": ["
    "  {\"role\": \"system\", \"content\": \"be {{ brief }} {% if %}\"},"
    "  {\"role\": \"user\", \"content\": \"h\\u00e9llo\\n\\t<|im_end|>\"},"
    "  {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    "   \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, -9223372036854775807, true]}}},"
    "   {\"function\": {\"name\": \"g\", \"arguments\": \"{\\\"y\\\": null}\"}}]},"
    "  {\"role\": \"tool\", \"content\": [{\"type\": \"text\", \"text\": \"42\"}], \"tool_call_id\": \"c1\"},"
    "  {\"role\": \"\", \"content\": \"\"},"
    "  {\"role\": \"ROLE\", \"content\": 7},"
    "  {\"role\": \"user\", \"content\": {\"nested\": {\"deep\": [[[]]]}}},"
    "  {\"role\": \"assistant\", \"content\": \"<think>x</think>y\", \"reasoning_content\": \"r\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    "   \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"array\"}},"
    "   \"required\": [\"x\"]}}}, {\"name\": \"bare\"}],"
    " \"documents\": [{\"title\": \"t\", \"text\": \"body\"}],"
    " \"add_generation_prompt\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static cJSON *vars[2];
  if (!vars[0]) {
    for (int k = 0; k < 2; k++) {
      vars[k] = cJSON_Parse(context);
      if (!vars[k]) abort();
      cJSON_ReplaceItemInObject(vars[k], "add_generation_prompt", cJSON_CreateBool(k));
    }
  }
  ssm_jinja *t = NULL;
  ssm_status s = ssm_jinja_parse("fuzz", (const char *)data, size, &t);
  if (s) {
    fuzz_check_error(s);
    return 0;
  }
  for (int k = 0; k < 2; k++) {
    char *out = NULL;
    size_t n = 0;
    s = ssm_jinja_render(t, vars[k], &out, &n);
    if (s) {
      if (out || n) fuzz_fail("a failed render gave text");
      fuzz_check_error(s);
      continue;
    }
    if (!out || out[n]) fuzz_fail("a render's text is not NUL-terminated at its length");
    free(out);
  }
  ssm_jinja_destroy(t);
  return 0;
}
