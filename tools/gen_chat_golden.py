#!/usr/bin/env python3
"""Renders the chat templates under tests/data/chat/<name>/ with Hugging Face
transformers' own chat-template code, for tests/test_chat.c to compare ssmc's
Jinja subset (serve/jinja*.c) against.

For each directory holding a chat_template.jinja (and, optionally, a
tokenizer_config.json giving bos_token / eos_token / unk_token / pad_token),
it renders the conversations of CASES below with
transformers.utils.chat_template_utils.render_jinja_template -- what
tokenizer.apply_chat_template(messages, tokenize=False, ...) calls -- and
writes tests/data/chat/<name>/golden.json:

  {"renderer": "transformers 5.x.y", "cases": [{"name", "messages", "tools",
   "add_generation_prompt", "text"} or {..., "error": "..."}]}

Nothing is downloaded: the templates are files of this repository.

    python3 tools/gen_chat_golden.py            # transformers (5.x) must be importable
    python3 tools/gen_chat_golden.py --jinja2   # without transformers: jinja2 set up as
                                                # transformers sets it up (a development aid)
"""
import argparse
import glob
import json
import os
import sys
from datetime import datetime

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "chat")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]

CASES = [
    ("user", [{"role": "user", "content": "Hello, how are you?"}], None, True),
    ("system_user", [{"role": "system", "content": "You are a concise assistant."},
                     {"role": "user", "content": "Answer with OK."}], None, True),
    ("multi_turn", [{"role": "system", "content": "You are helpful."},
                    {"role": "user", "content": "What is 2+2?"},
                    {"role": "assistant", "content": "4."},
                    {"role": "user", "content": "And 3+3?"}], None, True),
    ("multi_turn_no_prompt", [{"role": "user", "content": "What is 2+2?"},
                              {"role": "assistant", "content": "  4.  "},
                              {"role": "user", "content": "Thanks"},
                              {"role": "assistant", "content": "You're welcome!"}], None, False),
    ("whitespace_unicode", [{"role": "system", "content": "  Réponds en français.\n"},
                            {"role": "user", "content": "\"Quotes\" and 'apostrophes' \\ back\tslash, ünïcödé 日本語 🙂\n\n"}],
     None, True),
    ("no_system_no_prompt", [{"role": "user", "content": "Hi"}], None, False),
    ("content_parts", [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                    {"type": "text", "text": "part two"}]}], None, True),
    ("tools", [{"role": "system", "content": "Use tools when needed."},
               {"role": "user", "content": "Weather in Paris?"}], TOOLS, True),
    ("tool_call_round_trip", [{"role": "user", "content": "Weather in Paris?"},
                              {"role": "assistant", "content": "",
                               "tool_calls": [{"type": "function", "function": {
                                   "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
                              {"role": "tool", "content": "{\"temperature\": 21.5}"}], TOOLS, True),
    ("think_marker", [{"role": "system", "content": "{'reasoning': True} Be brief. /no_think"},
                      {"role": "user", "content": "Why is the sky blue? /think"}], None, True),
]


def renderer(use_jinja2):
    specials = ("bos_token", "eos_token", "unk_token", "pad_token")
    if not use_jinja2:
        import transformers
        from transformers.utils.chat_template_utils import render_jinja_template

        def render(template, messages, tools, agp, tokens):
            out, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                           add_generation_prompt=agp, **tokens)
            return out[0]
        return "transformers " + transformers.__version__, render
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)

    def render(template, messages, tools, agp, tokens):
        kw = dict(tokens)
        if tools is not None:
            kw["tools"] = tools
        return env.from_string(template).render(messages=messages, add_generation_prompt=agp, **kw)
    return "jinja2 " + jinja2.__version__ + " (set up as transformers does)", render


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jinja2", action="store_true", help="render with jinja2 instead of transformers")
    args = ap.parse_args()
    name, render = renderer(args.jinja2)
    dirs = sorted(glob.glob(os.path.join(ROOT, "*", "chat_template.jinja")))
    if not dirs:
        sys.exit("no tests/data/chat/*/chat_template.jinja")
    for path in dirs:
        d = os.path.dirname(path)
        template = open(path, encoding="utf-8").read()
        tokens = {}
        cfg = os.path.join(d, "tokenizer_config.json")
        if os.path.exists(cfg):
            c = json.load(open(cfg, encoding="utf-8"))
            for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
                v = c.get(k)
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str):
                    tokens[k] = v
        cases = []
        for cname, messages, tools, agp in CASES:
            case = {"name": cname, "messages": messages, "tools": tools, "add_generation_prompt": agp}
            try:
                case["text"] = render(template, messages, tools, agp, tokens)
            except Exception as e:  # the template refused or failed: ssmc must fail too
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
        out = os.path.join(d, "golden.json")
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"renderer": name, "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        os.replace(out + ".tmp", out)
        print(f"{out}: {sum('text' in c for c in cases)} rendered, {sum('error' in c for c in cases)} errors")


if __name__ == "__main__":
    main()
