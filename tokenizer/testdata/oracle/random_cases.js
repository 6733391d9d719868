// Random-string cases from Hugging Face's tokenizers (the same oracle as
// shared/golden/tokenizers: npm @anush008/tokenizers@0.6.0, a binding of the
// Rust crate 0.22.2), for TestOracleRandom. Not run in CI.
//
// usage: NODE_PATH=<oracle>/node_modules node random_cases.js <tokenizer.json> <n> <seed> <out.json> [max pieces, 24]
//
// Each case: the fields of a golden case (less "tokens"), plus "rand_ids"
// (random ids: model tokens, byte-fallback tokens and added tokens mixed)
// with "rand_decoded" / "rand_decoded_skip" (decode with and without the
// special tokens), so that the decoders see sequences encoding never makes.
'use strict';
const T = require('@anush008/tokenizers');
const fs = require('fs');

const [file, nArg, seedArg, outFile, maxArg] = process.argv.slice(2);
const maxPieces = Number(maxArg || 24);
const json = fs.readFileSync(file, 'utf8');
const spec = JSON.parse(json);
const added = (spec.added_tokens || []).map((a) => a.content);
const vocab = spec.model.vocab;
const vocabSize = Object.keys(vocab).length;
const byteIDs = Object.entries(vocab).filter(([t]) => /^<0x[0-9A-F]{2}>$/.test(t)).map(([, id]) => id);

// xorshift32, so that a seed gives the same strings everywhere.
let state = (Number(seedArg) >>> 0) || 1;
function rnd() {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + Math.floor(rnd() * (hi - lo + 1)));

const words = ['the', 'The', 'THE', 'hello', 'world', 'tokenizer', 'don\'t', 'I\'LL', 'we\'re', 'it\'s', 'snake_case',
  'camelCase', 'x', 'a', 'café', 'naïve', 'Zürich', 'über', 'Ελληνικά', 'Привет', '中文', '日本語', 'カタカナ', 'ひらがな',
  '한국어', 'العربية', 'हिन्दी', 'ภาษาไทย', 'ﬁ', 'Ｆｕｌｌ', '𝔘𝔫𝔦', 'ℌ', '½', '²', 'Ⅻ'];
const pieces = [
  () => pick(words),
  () => ' '.repeat(1 + Math.floor(rnd() * 4)),
  () => ' ',
  () => ' ',
  () => pick(['\n', '\n\n', '\r\n', '\t', ' \n', '\t\t', '\u000b', '\f']),
  () => String(Math.floor(rnd() * 1e6)),
  () => pick(['0', '00', '123', '4567', '3.14', '1,000', '-5']),
  () => pick(['.', ',', '!', '?', '...', '!!!', '--', '(', ')', '{', '}', '"', '\'', '’', '“', '”', '<', '>', '/', '\\', '#', '@', '$', '%', '&&', '==', '=>', '_']),
  () => range(0x20, 0x7e),
  () => range(0x80, 0x24f),
  () => range(0x300, 0x36f), // combining marks
  () => range(0x370, 0x52f),
  () => range(0x4e00, 0x9fa5),
  () => range(0x3040, 0x30ff),
  () => range(0xac00, 0xd7a3),
  () => range(0x600, 0x6ff),
  () => range(0x900, 0x97f),
  () => range(0xe00, 0xe7f),
  () => range(0x2000, 0x2bff), // punctuation, symbols, arrows
  () => range(0xe000, 0xf8ff), // private use (byte fallback)
  () => range(0x1f300, 0x1faff), // emoji
  () => range(0x10000, 0x10ffff), // astral, mostly unassigned (byte fallback)
  () => pick(['\u200b', '\u200d', '\ufeff', '\u00a0', '\u3000', '\u2581', '\u2582', '\ufffd', '\u0000', '\u001b', '\u007f']),
  () => pick(['👨‍👩‍👧', '🇫🇷', '👍🏽', '❤️']),
  () => (added.length ? pick(added) : 'x'),
  () => (added.length ? pick(added) : 'x'),
  () => pick(['<s>', '</s>', '<unk>', '<pad>', '<bos>', '<eos>', '<|endoftext|>', '<|start|>', '<|im_start|>', '<start_of_turn>', '<0x41>', '<｜begin▁of▁sentence｜>', '<', '<|', '|>']),
];

function randomText() {
  const n = Math.floor(rnd() * maxPieces);
  let s = '';
  for (let i = 0; i < n; i++) s += pick(pieces)();
  return s;
}

let addedIDs = [];
function randomIDs() {
  const n = Math.floor(rnd() * 12);
  const ids = [];
  for (let i = 0; i < n; i++) {
    const k = rnd();
    if (k < 0.3 && byteIDs.length) ids.push(pick(byteIDs));
    else if (k < 0.4 && addedIDs.length) ids.push(pick(addedIDs));
    else ids.push(Math.floor(rnd() * vocabSize));
  }
  return ids;
}

(async () => {
  const tk = T.Tokenizer.fromString(json);
  // The ids written in added_tokens are not the ones the library uses.
  addedIDs = added.map((c) => tk.tokenToId(c)).filter((id) => id !== undefined && id !== null);
  const out = [];
  for (let i = 0; i < Number(nArg); i++) {
    const text = randomText();
    const a = await tk.encode(text, null, { addSpecialTokens: false });
    const b = await tk.encode(text, null, { addSpecialTokens: true });
    const r = randomIDs();
    out.push({
      text,
      ids: a.getIds(),
      ids_with_special: b.getIds(),
      decoded: await tk.decode(a.getIds(), false),
      decoded_skip_special: await tk.decode(b.getIds(), true),
      rand_ids: r,
      rand_decoded: await tk.decode(r, false),
      rand_decoded_skip: await tk.decode(r, true),
    });
  }
  fs.writeFileSync(outFile, JSON.stringify(out));
  console.log(outFile, out.length, 'cases');
})();
