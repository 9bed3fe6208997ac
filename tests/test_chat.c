/*
 * test_chat.c — chat templates (serve/chat.c) on the Jinja subset
 * (serve/jinja*.c): the shipped templates of the supported families'
 * instruct models (tests/data/chat/, see its README) render every
 * conversation of their golden.json exactly as transformers'
 * apply_chat_template does (tools/gen_chat_golden.py); Jinja's whitespace
 * rules, loops, macros, filters and Python value semantics on small
 * templates; and every construct the subset lacks is refused at parse time
 * with the template's line and column, never rendered wrong.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "chat/jinja_internal.h"
#include "testutil.h"

static char *render(const char *tmpl, const char *vars_json, ssm_status *out_err) {
  ssm_jinja *t = NULL;
  char *out = NULL;
  size_t n;
  *out_err = ssm_jinja_parse("t", tmpl, strlen(tmpl), &t);
  if (*out_err) return NULL;
  cJSON *vars = cJSON_Parse(vars_json ? vars_json : "{}");
  *out_err = ssm_jinja_render(t, vars, &out, &n);
  cJSON_Delete(vars);
  ssm_jinja_destroy(t);
  return out;
}

static void expect(const char *tmpl, const char *vars, const char *want) {
  ssm_status s;
  char *got = render(tmpl, vars, &s);
  if (s) fprintf(stderr, "\n  %s: %s\n", tmpl, ssm_status_message(s));
  else if (strcmp(got, want)) fprintf(stderr, "\n  %s\n  got  [%s]\n  want [%s]\n", tmpl, got, want);
  CU_ASSERT(!s && !strcmp(got, want));
  ssm_status_free(s);
  free(got);
}

static void expect_error(const char *tmpl, const char *vars, const char *needle) {
  ssm_status s;
  char *got = render(tmpl, vars, &s);
  free(got);
  SSM_ASSERT_ERR(s, needle);
}

/* Each expectation was checked against jinja2 3.1 set up as transformers
 * sets it up (trim_blocks, lstrip_blocks, json.dumps tojson). */
static void test_whitespace(void) {
  expect("a\n{% if true %}\n  x\n{% endif %}\nb\n", NULL, "a\n  x\nb");
  expect("a  {%- if true -%}  x  {%- endif -%}  b", NULL, "axb");
  expect("  {% if true %}y{% endif %}|", NULL, "y|");
  expect("z  {% if true %}y{% endif %}|", NULL, "z  y|");
  expect("{{ 1 }}\n{{ 2 }}\n", NULL, "1\n2");
  expect("{# c #}\nq {#- c -#} r", NULL, "qr");
  expect("{%+ if true %}x{% endif %}", NULL, "x");
  expect("{% raw %}{{ not }}{% endraw %}!", NULL, "{{ not }}!");
  expect("a\r\nb", NULL, "a\nb");
}

static void test_expressions(void) {
  expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.0 }} {{ 1e-05 }} {{ 0.1 + 0.2 }}",
         NULL, "3 -4 2 3.5 1024 1.0 1e-05 0.30000000000000004");
  expect("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'x' + 'y' }}", NULL,
         "a1NoneTrue ababab [1, 2] xy");
  expect("{{ 0 or 'd' }} {{ 'a' and 'b' }} {{ not 0 }} {{ 1 if false }}|{{ 2 if 0 else 3 }}", NULL,
         "d b True |3");
  expect("{{ 1 == 1.0 }} {{ 'b' > 'a' }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}",
         NULL, "True True True True True");
  expect("{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[9] is defined }}{{ l[-2:] }}",
         "{\"s\": \"héllo\", \"l\": [1, 2, 3]}", "hoélolléhFalse[2, 3]");
  expect("{{ d.a }}{{ d['b'] }}{{ d.zz is defined }}{{ none.x is defined }}", "{\"d\": {\"a\": 1, \"b\": [2]}}",
         "1[2]FalseFalse");
  expect("{{ {'a': 'x\"y', 'b': [1.5, none, true]} }} {{ \"it's\" | string }} {{ ['it\\'s'] }}", NULL,
         "{'a': 'x\"y', 'b': [1.5, None, True]} it's [\"it's\"]");
  expect("{{ '\\u00e9\\x41\\n' }}", NULL, "\xc3\xa9" "A\n");
}

static void test_statements(void) {
  expect("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
         "{{ loop.revindex }}{% if not loop.last %},{% endif %}{% endfor %}", "{\"xs\": [\"a\", \"b\"]}",
         "10TrueFalse22,21FalseTrue21");
  expect("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", "{\"xs\": [1, 2, 3]}",
         "2232");
  expect("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", NULL, "empty");
  expect("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
         "{\"d\": {\"a\": 1, \"b\": 2}}", "a=1;b=2;ab");
  expect("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}"
         "{{ x }}{% endfor %}", NULL, "02");
  expect("{% set c = 0 %}{% for x in [1,2] %}{% set c = c + x %}{% endfor %}{{ c }}", NULL, "0");
  expect("{% set ns = namespace(c=0) %}{% for x in [1,2] %}{% set ns.c = ns.c + x %}{% endfor %}{{ ns.c }}",
         NULL, "3");
  expect("{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set t %}in{{ a }}{% endset %}{{ t }}", NULL, "21in1");
  expect("{% macro m(x, y=2, z=none) %}{{ x }}{{ y }}{{ z }}{% endmacro %}{{ m(1) }}|{{ m(1, z=3) }}|"
         "{{ m(*[4, 5]) }}", NULL, "12None|123|45None");
  expect("{% macro inner() %}I{% endmacro %}{% macro outer() %}<{{ inner() }}>{% endmacro %}"
         "{% set fs = [outer] %}{{ fs[0]() }}", NULL, "<I>");
  expect("{% if a %}A{% elif b %}B{% else %}C{% endif %}", "{\"a\": 0, \"b\": []}", "C");
  expect("{% for x in 'ab' %}{{ loop.cycle('o', 'e') }}{% endfor %}", NULL, "oe");
}

static void test_filters_and_methods(void) {
  expect("{{ '  x  ' | trim }}|{{ 'abc' | length }}|{{ u | default('d') }}|{{ '' | default('e', true) }}", NULL,
         "x|3|d|e");
  expect("{{ x | tojson }} {{ x | tojson(indent=2) }}", "{\"x\": {\"a\": [1, \"é\\n\"], \"b\": {}}}",
         "{\"a\": [1, \"é\\n\"], \"b\": {}} {\n  \"a\": [\n    1,\n    \"é\\n\"\n  ],\n  \"b\": {}\n}");
  expect("{{ ['a', 'b'] | join(', ') }} {{ 'ab cd' | title }} {{ 'x' | upper }} {{ '7' | int + 1 }} "
         "{{ 'q' | int }} {{ [3, 1] | first }} {{ 'abc' | list }} {{ [1, 2, 1] | unique | list }}",
         NULL, "a, b Ab Cd X 8 0 3 ['a', 'b', 'c'] [1, 2]");
  expect("{{ xs | map(attribute='n') | list }} {{ xs | selectattr('n', 'equalto', 2) | list | length }} "
         "{{ [1, 2, 3] | select('odd') | list }} {{ [1, 0] | reject | list }}",
         "{\"xs\": [{\"n\": 1}, {\"n\": 2}]}", "[1, 2] 1 [1, 3] [0]");
  expect("{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'abc'.replace('b', 'x') }}|"
         "{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ d.get('z', 9) }}|{{ d.keys() | list }}",
         "{\"d\": {\"k\": 1}}", "a b|['a', 'b']|['a', 'b', 'c']|axc|TrueTrue|9|['k']");
  expect("{{ x is string }}{{ x is mapping }}{{ 3 is odd }}{{ y is none }}{{ false is false }}{{ 4 is divisibleby 2 }}"
         "{{ [] is iterable }}{{ x is not defined }}", "{\"x\": \"s\", \"y\": null}", "TrueFalseTrueTrueTrueTrueTrueFalse");
}

/* Constructs the subset lacks fail when the template is parsed, naming the
 * place; errors while rendering name theirs. */
static void test_refused(void) {
  expect_error("a\n  {% call m() %}x{% endcall %}", NULL, "t:2:6: unsupported Jinja statement 'call'");
  expect_error("{{ x | wordwrap }}", NULL, "t:1:8: unsupported filter 'wordwrap'");
  expect_error("{{ x is escaped }}", NULL, "unsupported test 'escaped'");
  expect_error("{{ 'a'.zfill(3) }}", NULL, "unsupported method 'zfill'");
  expect_error("{{ cycler('a') }}", NULL, "t:1:4: unsupported function 'cycler'");
  expect_error("{% for x in y recursive %}{% endfor %}", NULL, "unsupported 'for ... recursive'");
  expect_error("{% include 'x' %}", NULL, "unsupported Jinja statement 'include'");
  expect_error("{% if x %}never closed", NULL, "t:1:3: {% if %} is not closed (expected {% endif %})");
  expect_error("a\n{% for x in y %}{% if x %}{% endif %}", NULL, "t:2:3: {% for %} is not closed (expected {% endfor %})");
  expect_error("\n {% if x %}a{% elif y %}b{% else %}c", NULL, "t:2:4: {% if %} is not closed (expected {% endif %})");
  expect_error("{% macro m() %}{% for x in y %}{% endfor %}", NULL, "t:1:3: {% macro %} is not closed");
  expect_error("{{ x", NULL, "t:1:1: '{{' is not closed");
  expect_error("{% endfor %}", NULL, "unexpected {% endfor %}");
  expect_error("{{ 'abc }}", NULL, "t:1:1: '{{' is not closed");
  expect_error("{% set x = 'abc %}{% endset %}", NULL, "t:1:1: '{%' is not closed");
  expect_error("{{ 1 + }}", NULL, "expected an expression");
  expect_error("{{ raise_exception('no system role') }}", NULL,
               "the chat template refused the request: no system role");
  expect_error("\n{{ u.x }}", NULL, "t:2:5: 'u' is undefined");
  expect_error("{{ 1 + 'a' }}", NULL, "unsupported operand types for +: 'int' and 'str'");
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, "macro 'm' takes 1 arguments, got 2");
  expect_error("{% for x in range(100000000) %}{% endfor %}", NULL, "range of 100000000 items");
  expect_error("{% for x in range(1000000) %}{{ '' }}{{ '' }}{{ '' }}{{ '' }}{{ '' }}{% endfor %}", NULL,
               "runs too long");
  expect_error("{% set ys = [1, 2, 3, 4, 5, 6] %}{% for x in range(1000000) %}{% for y in ys %}{% endfor %}"
               "{% endfor %}", NULL, "t:1:");
}

/* A template that repeats `unit` n times between `head` and `tail`. */
static char *repeat(const char *head, const char *unit, int n, const char *tail) {
  size_t u = strlen(unit), h = strlen(head), t = strlen(tail);
  char *s = malloc(h + u * (size_t)n + t + 1);
  memcpy(s, head, h);
  for (int i = 0; i < n; i++) memcpy(s + h + u * (size_t)i, unit, u);
  memcpy(s + h + u * (size_t)n, tail, t + 1);
  return s;
}

static void expect_error_free(char *tmpl, const char *needle) {
  expect_error(tmpl, NULL, needle);
  free(tmpl);
}

/* A template is untrusted: nesting, arithmetic, work and memory are
 * bounded, and each failure is an error of that render with its place,
 * never a crash or a hang. */
static void test_bounds(void) {
  /* nesting: the parser's and the evaluator's */
  char *open = repeat("{{ ", "(", 20000, "1"), *parens = repeat(open, ")", 20000, " }}");
  free(open);
  expect_error_free(parens, "t:1:103: expressions and blocks nested deeper than 100");
  expect_error_free(repeat("{{ ", "(", 20000, "1 }}"), "t:1:1: '{{' is not closed");
  expect_error_free(repeat("{{ ", "-", 200000, "1 }}"), "t:1:103: expressions and blocks nested deeper than 100");
  expect_error_free(repeat("", "{% if true %}", 30000, "x"), "t:1:1294: expressions and blocks nested deeper than 100");
  expect_error_free(repeat("{{ ", "not ", 30000, "1 }}"), "nested deeper than 100");
  expect_error_free(repeat("{{ 1", " + 1", 20000, " }}"), "t:1:");
  expect_error_free(repeat("{{ 1", " + 1", 20000, " }}"), "nested deeper than 400");
  char *elifs = repeat("{% if false %}", "{% elif false %}", 20000, "{% else %}z{% endif %}");
  expect(elifs, NULL, "z");
  free(elifs);
  expect("{{ [[[[1]]]] }}", NULL, "[[[[1]]]]");
  expect_error("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns | tojson }}", NULL,
               "t:1:54: tojson: a value nested deeper than 400");
  expect_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}"
               "{{ ns.l }}", NULL, "values nested deeper than 400");

  /* int64 edges: Python's results where they fit, else an error naming the operation */
  expect("{{ (-9223372036854775807 - 1) % -1 }} {{ (-9223372036854775807 - 1) is divisibleby(-1) }} "
         "{{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 3 ** 39 }} {{ 2 ** -1 }}",
         NULL, "0 True -4 -4 2 -2 4052555153018976267 0.5");
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", NULL, "t:1:31: integer overflow in floor division");
  expect_error("{{ 9223372036854775807 + 1 }}", NULL, "t:1:24: integer overflow in addition");
  expect_error("{{ -9223372036854775807 - 2 }}", NULL, "integer overflow in subtraction");
  expect_error("{{ 4611686018427387904 * 2 }}", NULL, "integer overflow in multiplication");
  expect_error("{{ 2 ** 64 }}", NULL, "integer overflow in power");
  expect_error("{{ -(-9223372036854775807 - 1) }}", NULL, "integer overflow in negation");
  expect_error("{{ [9223372036854775807, 1] | sum }}", NULL, "t:1:31: integer overflow in addition");
  expect_error("{{ (-9223372036854775807 - 1) | abs }}", NULL, "integer overflow in negation");
  expect_error("{{ 9223372036854775808 }}", NULL, "t:1:4: integer 9223372036854775808 does not fit 64 bits");
  expect("{{ 1e300 | int }} {{ '1e300' | int }} {{ '99999999999999999999' | int(7) }}", NULL, "0 0 7");
  expect("{% for i in range(9223372036854775800, 9223372036854775807, 5) %}{{ i }},{% endfor %}"
         "{{ range(-9223372036854775807 - 1, -9223372036854775807 + 1) | list }}"
         "{{ range(9223372036854775807, 9223372036854775806, -9223372036854775807 - 1) | list }}",
         NULL, "9223372036854775800,9223372036854775805,[-9223372036854775808, -9223372036854775807]"
         "[9223372036854775807]");
  expect_error("{{ range(-9223372036854775807 - 1, 9223372036854775807) }}", NULL,
               "range of 18446744073709551615 items");
  expect("{{ 'abc'[-9223372036854775807 - 1:9223372036854775807:9223372036854775807] }}", NULL, "a");

  /* work inside filters and values' bytes, not only loop steps */
  expect_error("{{ range(1000000) | unique | length }}", NULL, "t:1:21: the template runs too long");
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               NULL, "t:1:75: a string longer than 8388608 bytes");
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               NULL, "a string longer than");
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               NULL, "t:1:");
  expect_error("{{ ('x' * 100000) | replace('', 'y' * 100000) }}", NULL, "a string longer than");
  expect_error("{{ 'ab' * 9223372036854775807 }}", NULL, "a string longer than");
  expect_error("{% set s = 'x' * 8000000 %}{% for i in range(100000) %}{% if s == s %}{% endif %}{% endfor %}",
               NULL, "runs too long");
  expect_error("{% set s = 'x' * 1000000 %}{% for i in range(1000000) %}{{ s[-1] }}{% endfor %}", NULL, "t:1:");
  expect("{% set s = 'b' * 4000000 %}{{ s.strip(s ~ 'a') | length }}", NULL, "0");
  /* an object of the variables with 200,000 keys: its dict is not built key by key past the steps */
  ssm_sb vars = {0};
  ssm_sb_printf(&vars, "{\"d\": {");
  for (int i = 0; i < 200000; i++) ssm_sb_printf(&vars, "%s\"k%d\": %d", i ? ", " : "", i, i);
  ssm_sb_printf(&vars, "}}");
  expect_error("{{ d | length }}", ssm_sb_str(&vars), "runs too long");
  ssm_sb_free(&vars);
}

/* The parse is linear in the text: a 560 KB template parses and renders,
 * and the parser walks each byte about once to place its tokens. */
static void test_large_template(void) {
  char *tmpl = repeat("", "{{ x }} some text {% if x %}{{ x | length }}{% endif %}{# c #}\n", 9000,
                      "{% set y = x %}{{ y() if false }}");
  size_t len = strlen(tmpl);
  CU_ASSERT(len > 560000);
  ssm_jinja *t = NULL;
  ssm_status s = ssm_jinja_parse("t", tmpl, len, &t);
  CU_ASSERT_PTR_NULL_FATAL(s);
  CU_ASSERT(t->walked <= 2 * len);
  cJSON *vars = cJSON_Parse("{\"x\": \"ab\"}");
  char *out = NULL;
  size_t n = 0;
  s = ssm_jinja_render(t, vars, &out, &n);
  CU_ASSERT_PTR_NULL(s);
  CU_ASSERT(n == 9000 * strlen("ab some text 2"));
  ssm_status_free(s);
  free(out);
  cJSON_Delete(vars);
  ssm_jinja_destroy(t);
  free(tmpl);
}

/* The shipped templates against transformers' renderings. */
static void test_goldens(void) {
  DIR *d = opendir(ssm_test_path("tests/data/chat"));
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  int templates = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
    char dir[1024], golden[1100];
    snprintf(dir, sizeof dir, "%s/%s", ssm_test_path("tests/data/chat"), e->d_name);
    snprintf(golden, sizeof golden, "%s/golden.json", dir);
    ssm_chat *chat = NULL;
    SSM_ASSERT_OK(ssm_chat_open(dir, NULL, &chat));
    CU_ASSERT_PTR_NOT_NULL(chat);
    char *text;
    size_t n;
    ssm_status s = ssm_file_read(golden, 0, &text, &n);
    SSM_ASSERT_OK(s);
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *cases = cJSON_GetObjectItem(g, "cases");
    CU_ASSERT(cJSON_GetArraySize(cases) >= 8);
    for (const cJSON *c = cases ? cases->child : NULL; c && chat; c = c->next) {
      const cJSON *tools = cJSON_GetObjectItem(c, "tools"), *want = cJSON_GetObjectItem(c, "text");
      char *got = NULL;
      size_t len;
      s = ssm_chat_render(chat, cJSON_GetObjectItem(c, "messages"), cJSON_IsNull(tools) ? NULL : tools, NULL,
                          cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")), &got, &len);
      int ok = want ? !s && len == strlen(want->valuestring) && !memcmp(got, want->valuestring, len) : s != NULL;
      if (!ok)
        fprintf(stderr, "\n  %s / %s: %s\n  got  [%s]\n  want [%s]\n", e->d_name,
                cJSON_GetObjectItem(c, "name")->valuestring, s ? ssm_status_message(s) : "",
                got ? got : "", want ? want->valuestring : "an error");
      CU_ASSERT(ok);
      ssm_status_free(s);
      free(got);
    }
    cJSON_Delete(g);
    ssm_chat_close(chat);
    templates++;
  }
  closedir(d);
  CU_ASSERT(templates >= 5);
}

/* Where the template comes from, and what is wrong with a bad one. */
static const char *write_in(const char *sub, const char *file, const char *text) {
  static char path[1024];
  char cmd[1200];
  snprintf(path, sizeof path, "%s/%s", ssm_test_tmpdir(), sub);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0);
  if (file) {
    char rel[600];
    snprintf(rel, sizeof rel, "%s/%s", sub, file);
    ssm_test_write(rel, text, strlen(text));
  }
  return path;
}

/* Where the template comes from, and what is wrong with a bad one. */
static void test_sources(void) {
  ssm_chat *c = NULL;
  SSM_ASSERT_OK(ssm_chat_open(write_in("chat-none", NULL, NULL), NULL, &c));
  CU_ASSERT_PTR_NULL(c);
  const char *dir = write_in("chat-cfg", "tokenizer_config.json",
                             "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                             " {\"name\": \"default\", \"template\": \"{{ bos_token }}{{ messages[0].content }}\"}],"
                             " \"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}}");
  SSM_ASSERT_OK(ssm_chat_open(dir, NULL, &c));
  CU_ASSERT_FATAL(c != NULL);
  cJSON *m = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
  char *out = NULL;
  size_t n;
  SSM_ASSERT_OK(ssm_chat_render(c, m, NULL, NULL, 1, &out, &n));
  CU_ASSERT_STRING_EQUAL(out ? out : "", "<s>hi");
  free(out);
  cJSON_Delete(m);
  ssm_chat_close(c);
  dir = write_in("chat-bad", "tokenizer_config.json", "{\"chat_template\": \"{% for %}\"}");
  SSM_ASSERT_ERR(ssm_chat_open(dir, NULL, &c), "chat-bad/tokenizer_config.json:1:8: expected a variable name");
  dir = write_in("chat-json", "tokenizer_config.json", "{\"chat_template\": ");
  SSM_ASSERT_ERR(ssm_chat_open(dir, NULL, &c), "tokenizer_config.json:1:");
  SSM_ASSERT_ERR(ssm_chat_open(write_in("chat-none", NULL, NULL), "/nonexistent/t.jinja", &c),
                 "--chat-template: ");
  /* chat_template.jinja wins over tokenizer_config.json, as in transformers */
  dir = write_in("chat-cfg", "chat_template.jinja", "J{{ messages | length }}\n");
  SSM_ASSERT_OK(ssm_chat_open(dir, NULL, &c));
  m = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
  if (c) SSM_ASSERT_OK(ssm_chat_render(c, m, NULL, NULL, 1, &out, &n));
  CU_ASSERT_STRING_EQUAL(c && out ? out : "", "J1");
  if (c) free(out);
  cJSON_Delete(m);
  ssm_chat_close(c);
}

/* strftime_now: a date of any length up to 4094 bytes (a format of plain
 * text is its own result), an empty one, and an error past the bound. */
static void test_strftime_now(void) {
  char tmpl[4200], want[4100];
  static const size_t lens[] = {255, 256, 1000, 4094};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    memset(want, 'x', lens[i]);
    want[lens[i]] = 0;
    snprintf(tmpl, sizeof tmpl, "{{ strftime_now('%s') }}", want);
    expect(tmpl, NULL, want);
  }
  expect("[{{ strftime_now('') }}]", NULL, "[]");
  ssm_status s;
  char *got = render("{{ strftime_now('%Y-%m-%d') | length }}", NULL, &s);
  CU_ASSERT(!s && got && !strcmp(got, "10"));
  ssm_status_free(s);
  free(got);
  memset(want, 'x', 4095);
  want[4095] = 0;
  snprintf(tmpl, sizeof tmpl, "{{ strftime_now('%s') }}", want);
  expect_error(tmpl, NULL, "strftime_now: the date is longer than 4094 bytes");
}

int main(void) {
  CU_TestInfo tests[] = {{"whitespace", test_whitespace}, {"strftime_now", test_strftime_now},
                         {"expressions", test_expressions},
                         {"statements", test_statements},
                         {"filters_and_methods", test_filters_and_methods},
                         {"refused", test_refused},
                         {"bounds", test_bounds},
                         {"large_template", test_large_template},
                         {"goldens", test_goldens},
                         {"sources", test_sources},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("chat", tests);
}
