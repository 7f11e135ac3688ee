// Renders every case in ../cases/cases.json with @huggingface/jinja (the reference renderer that
// runs on this machine) and writes ../cases/goldens.json.
//
//   mkdir -p /tmp/jinja-ref && cd /tmp/jinja-ref && npm install @huggingface/jinja@0.5.13
//   NODE_PATH=/tmp/jinja-ref/node_modules node tests/template/reference/render_goldens.mjs
//   (optional) QWEN3_TOKENIZER_CONFIG=.../tokenizer_config.json adds the real Qwen3 template cases
//
// Chat cases are rendered the way transformers' apply_chat_template calls the template: special
// tokens and kwargs first, then messages, tools, documents=None, add_generation_prompt; tool-call
// arguments given as JSON strings are parsed first (vLLM does this before rendering).
// Where a case carries python_expected (jinja2 in Python prints True/None, repr()s lists, ...), that
// text is the golden and the reference's own output is kept beside it for the record.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const { Template } = require(require.resolve("@huggingface/jinja", { paths: (process.env.NODE_PATH || "").split(":").concat([process.cwd()]) }));

const here = path.dirname(fileURLToPath(import.meta.url));
const casesDir = path.join(here, "..", "cases");
const templatesDir = path.join(here, "..", "templates");
const spec = JSON.parse(fs.readFileSync(path.join(casesDir, "cases.json"), "utf8"));

function chatContext(chat) {
  const messages = JSON.parse(JSON.stringify(chat.messages));
  for (const m of messages) {
    for (const call of m.tool_calls || []) {
      const fn = call.function;
      if (fn && typeof fn.arguments === "string") {
        try { fn.arguments = JSON.parse(fn.arguments); } catch { /* stays a string */ }
      }
    }
  }
  return { ...chat.special_tokens, ...chat.kwargs, messages, tools: chat.tools ?? null, documents: null,
           add_generation_prompt: chat.add_generation_prompt };
}

function templateSource(c) {
  if (c.template !== undefined) return c.template;
  if (c.template_file) return fs.readFileSync(path.join(templatesDir, c.template_file), "utf8");
  if (c.template_from === "qwen3_tokenizer_config") {
    const p = process.env.QWEN3_TOKENIZER_CONFIG;
    if (!p) return null;
    return JSON.parse(fs.readFileSync(p, "utf8")).chat_template;
  }
  throw new Error(`case ${c.name}: no template`);
}

const goldens = {};
const referenceDiffers = {};
let failed = false;
for (const c of spec.cases) {
  const source = templateSource(c);
  if (source === null) {
    console.error(`skip ${c.name}: QWEN3_TOKENIZER_CONFIG not set`);
    continue;
  }
  const ctx = c.chat ? chatContext(c.chat) : c.context;
  let ref;
  try {
    ref = new Template(source).render(ctx);
  } catch (e) {
    ref = `ERROR: ${e.message}`;
  }
  if (c.python_expected !== undefined) {
    goldens[c.name] = c.python_expected;
    if (ref !== c.python_expected) referenceDiffers[c.name] = ref;
  } else if (ref.startsWith("ERROR: ")) {
    console.error(`${c.name}: reference failed: ${ref}`);
    failed = true;
  } else {
    goldens[c.name] = ref;
  }
}
const out = { generator: "@huggingface/jinja via tests/template/reference/render_goldens.mjs", goldens,
              reference_output_where_python_differs: referenceDiffers };
fs.writeFileSync(path.join(casesDir, "goldens.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`${Object.keys(goldens).length} goldens written, ${Object.keys(referenceDiffers).length} python overrides`);
process.exit(failed ? 1 : 0);
