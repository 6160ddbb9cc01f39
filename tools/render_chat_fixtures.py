#!/usr/bin/env python3
"""render_chat_fixtures.py - renders tests/fixtures/chat/conversations.json with the Qwen3.5 chat
template (given as the argument; not committed, see tests/fixtures/README.md) using Jinja2 the way HF transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its `tojson`), and
writes the expected prompts to tests/fixtures/chat/expected/<name>.txt.

Run once when the conversations change (the outputs are committed):
    /usr/bin/python3 tools/render_chat_fixtures.py        # Debian python3-jinja2
Error cases are not rendered here; tests/test_chat.c checks them against the template text.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override of Jinja's tojson (no HTML escaping)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
if len(sys.argv) != 2:
    sys.exit("usage: render_chat_fixtures.py QWEN3.5_TEMPLATE.jinja  (see tests/fixtures/README.md, chat/)")
with open(sys.argv[1], encoding="utf-8") as f:
    template = env.from_string(f.read())
with open(os.path.join(here, "conversations.json"), encoding="utf-8") as f:
    cases = json.load(f)
os.makedirs(os.path.join(here, "expected"), exist_ok=True)
for case in cases:
    kwargs = {"messages": case["messages"], "add_generation_prompt": case.get("add_generation_prompt", False)}
    if "tools" in case:
        kwargs["tools"] = case["tools"]
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    text = template.render(**kwargs)
    with open(os.path.join(here, "expected", case["name"] + ".txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    print(f"{case['name']}: {len(text)} chars", file=sys.stderr)
print(f"jinja2 {jinja2.__version__}", file=sys.stderr)
