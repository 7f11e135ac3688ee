// Writes golden token ids for every corpus string, using the reference @huggingface/tokenizers
// (pure JS port of HF tokenizers). Run from a temp dir where that package is installed:
//   cd /tmp/ref && npm install @huggingface/tokenizers@0.2.0
//   NODE_PATH=/tmp/ref/node_modules node golden_ids.mjs <tokenizer_dir> <corpus.json> <out.json>
// (ESM ignores NODE_PATH, so the package is loaded with createRequire from REF_DIR or NODE_PATH.)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [tokDir, corpusPath, outPath] = process.argv.slice(2);
const refDir = process.env.REF_DIR ?? path.dirname(process.env.NODE_PATH ?? ".");
const require = createRequire(path.join(refDir, "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");

const tokJson = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8"));
const cfgJson = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tokJson, cfgJson);
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const cases = corpus.map((text) => ({
  text,
  ids: tok.encode(text, { add_special_tokens: false }).ids,
  ids_with_special: tok.encode(text, { add_special_tokens: true }).ids,
}));
// What decoding gives back (differs from the text where NFC or lstrip/rstrip changed it).
for (const c of cases) c.decoded = c.ids.length ? tok.decode(c.ids, { clean_up_tokenization_spaces: false }) : "";
// One id list per line keeps the file diffable and small.
const body = cases.map((c) => "  " + JSON.stringify(c)).join(",\n");
fs.writeFileSync(outPath, `{"reference": "@huggingface/tokenizers", "cases": [\n${body}\n]}\n`);
console.log(`${cases.length} cases -> ${outPath}`);
