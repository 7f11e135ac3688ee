#!/usr/bin/env python3
"""Renders every case with Python jinja2 configured as transformers configures it (sandboxed,
trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now), to settle
cases where @huggingface/jinja (the Node reference) differs from jinja2 or lacks a feature.

    python3 tests/template/reference/jinja2_check.py            # print cases that differ from goldens
    python3 tests/template/reference/jinja2_check.py --write    # set python_expected where they differ

transformers uses ImmutableSandboxedEnvironment, which forbids list.append; a case that needs it
is rendered with the mutable SandboxedEnvironment and says so in its note.
"""
import json, os, sys
from datetime import datetime
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

here = os.path.dirname(os.path.abspath(__file__))
cases_path = os.path.join(here, "..", "cases", "cases.json")
goldens_path = os.path.join(here, "..", "cases", "goldens.json")
templates = os.path.join(here, "..", "templates")


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def env(cls):
    e = cls(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return e


def context(case):
    if "context" in case:
        return case["context"]
    chat = case["chat"]
    messages = json.loads(json.dumps(chat["messages"]))
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function")
            if fn and isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    pass
    return {**chat["special_tokens"], **chat["kwargs"], "messages": messages, "tools": chat["tools"],
            "documents": None, "add_generation_prompt": chat["add_generation_prompt"]}


def source(case):
    if "template" in case:
        return case["template"]
    if "template_file" in case:
        with open(os.path.join(templates, case["template_file"]), encoding="utf-8") as f:
            return f.read()
    p = os.environ.get("QWEN3_TOKENIZER_CONFIG")
    if not p:
        return None
    with open(p, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def render(case):
    src = source(case)
    if src is None:
        return None, False
    try:
        return env(ImmutableSandboxedEnvironment).from_string(src).render(**context(case)), False
    except Exception as immutable_error:  # noqa: BLE001 - report and retry mutable
        if "unsafe" not in str(immutable_error):
            return "ERROR: " + str(immutable_error), False
        return env(SandboxedEnvironment).from_string(src).render(**context(case)), True


def main():
    with open(cases_path, encoding="utf-8") as f:
        spec = json.load(f)
    goldens = {}
    if os.path.exists(goldens_path):
        with open(goldens_path, encoding="utf-8") as f:
            goldens = json.load(f)["goldens"]
    write = "--write" in sys.argv
    for case in spec["cases"]:
        out, mutable = render(case)
        if out is None:
            continue
        want = case.get("python_expected", goldens.get(case["name"]))
        if out != want:
            print(f"--- {case['name']}\n jinja2: {out!r}\n golden: {want!r}")
            if write:
                case["python_expected"] = out
        if mutable and write:
            note = "list.append needs jinja2's mutable sandbox (transformers' immutable one refuses it)"
            if note not in case.get("note", ""):
                case["note"] = (case.get("note", "") + "; " + note).lstrip("; ")
    if write:
        with open(cases_path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
