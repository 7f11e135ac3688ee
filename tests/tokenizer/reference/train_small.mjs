// Builds engine/serve/assets/demo_tokenizer/tokenizer.json: a small byte-level BPE tokenizer trained here
// by plain pair counting, so CI has a real tokenizer.json without downloading anything.
// Usage: node train_small.mjs <corpus.json> <out_dir>
// Deterministic: ties between equally frequent pairs go to the lexicographically smaller pair.
import fs from "node:fs";
import path from "node:path";

const [corpusPath, outDir] = process.argv.slice(2);
const NUM_MERGES = 400;

// Extra prose so merges cover common English beyond the test corpus.
const prose = `
The tokenizer turns text into numbers and back. A language model reads those numbers, one token at
a time, and predicts the next one. When the server streams its answer, it sends each piece of text
as soon as the bytes form complete characters. Tests compare our ids with a reference implementation
on code, prose, JSON, numbers and text in many scripts. This is the way the world works: the small
things add up, and the details matter more than anyone thinks they will.
`;
// Added-token text is cut out first, as the tokenizer does, so BPE never learns pieces of it.
const addedContents = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<mask>", "<think>", "</think>", "[END]", "<|im"];
let text = JSON.parse(fs.readFileSync(corpusPath, "utf8")).join("\n") + prose.repeat(3);
for (const c of [...addedContents].sort((a, b) => b.length - a.length)) text = text.split(c).join("\n");

// GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest to U+0100 onwards.
function bytesToUnicode() {
  const keep = [];
  for (let b = 0x21; b <= 0x7e; ++b) keep.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) keep.push(b);
  for (let b = 0xae; b <= 0xff; ++b) keep.push(b);
  const table = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; ++b) table[b] = keep.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + extra++);
  return table;
}
const b2u = bytesToUnicode();

// Pre-tokenize the way the tokenizer.json below says (a JS spelling of the same regex).
const splitRegex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const jsRegex = /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;
const enc = new TextEncoder();
const counts = new Map();
for (const piece of text.match(jsRegex) ?? []) {
  const word = Array.from(enc.encode(piece), (b) => b2u[b]).join("");
  counts.set(word, (counts.get(word) ?? 0) + 1);
}
let words = [...counts].map(([w, n]) => ({ syms: Array.from(w), n }));

const vocab = new Map();
for (let b = 0; b < 256; ++b) vocab.set(b2u[b], vocab.size);
const merges = [];
for (let m = 0; m < NUM_MERGES; ++m) {
  const pairs = new Map();
  for (const { syms, n } of words)
    for (let i = 0; i + 1 < syms.length; ++i) {
      const key = syms[i] + " " + syms[i + 1];
      pairs.set(key, (pairs.get(key) ?? 0) + n);
    }
  let best = null;
  for (const [key, n] of pairs)
    if (best === null || n > best[1] || (n === best[1] && key < best[0])) best = [key, n];
  if (best === null || best[1] < 2) break;
  const [a, b] = best[0].split(" ");
  merges.push(best[0]);
  vocab.set(a + b, vocab.size);
  words = words.map(({ syms, n }) => {
    const out = [];
    for (let i = 0; i < syms.length; ++i) {
      if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) { out.push(a + b); ++i; }
      else out.push(syms[i]);
    }
    return { syms: out, n };
  });
}

// Added tokens cover each flag the encoder honours: special and not, lstrip, rstrip, normalized.
let next = vocab.size;
const added = (content, extra) => ({ id: next++, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true, ...extra });
const added_tokens = [
  added("<|endoftext|>"),
  added("<|im_start|>"),
  added("<|im_end|>"),
  added("<mask>", { lstrip: true }),
  added("<think>", { special: false }),
  added("</think>", { special: false }),
  added("[END]", { special: false, normalized: true, rstrip: true }),
  added("<|im", { special: false }),
];
// HF gives an added token whose content is already in the vocabulary the vocabulary's id; keep
// the file consistent so that rule never applies.
for (const t of added_tokens) if (vocab.has(t.content)) throw new Error(`added token ${t.content} is in the vocab`);

const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens,
  normalizer: { type: "Sequence", normalizers: [{ type: "NFC" }] },
  pre_tokenizer: { type: "Sequence", pretokenizers: [
    { type: "Split", pattern: { Regex: splitRegex }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ] },
  post_processor: { type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<|endoftext|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "<|endoftext|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
           { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { "<|endoftext|>": { id: "<|endoftext|>", ids: [added_tokens[0].id], tokens: ["<|endoftext|>"] } } },
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab: Object.fromEntries(vocab), merges },
};
const config = {
  bos_token: "<|endoftext|>",
  eos_token: { content: "<|im_end|>", lstrip: false, rstrip: false, normalized: false, special: true },
  pad_token: "<|endoftext|>",
  clean_up_tokenization_spaces: false,
  model_max_length: 4096,
};
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "tokenizer.json"), JSON.stringify(tokenizer, null, 1) + "\n");
fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(config, null, 1) + "\n");
console.log(`vocab ${vocab.size}, merges ${merges.length}, added ${added_tokens.length}`);
