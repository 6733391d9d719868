// Writes ../<name>.cases.json for every ../<name>.json with the oracle: npm
// @anush008/tokenizers@0.6.0, a binding of Hugging Face's tokenizers 0.22.2.
// usage: node gen_cases.js <node_modules dir holding @anush008/tokenizers>
'use strict';
const path = require('path');
const fs = require('fs');
const T = require(path.join(process.argv[2], '@anush008/tokenizers'));
const dir = path.join(__dirname, '..');
const texts = JSON.parse(fs.readFileSync(path.join(__dirname, 'texts.json'), 'utf8'));
(async () => {
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.json') && !f.endsWith('.cases.json')).sort()) {
    const tk = T.Tokenizer.fromString(fs.readFileSync(path.join(dir, f), 'utf8'));
    const out = [];
    for (const text of texts) {
      const a = await tk.encode(text, null, { addSpecialTokens: false });
      const b = await tk.encode(text, null, { addSpecialTokens: true });
      out.push({
        text,
        ids: a.getIds(),
        ids_with_special: b.getIds(),
        decoded: await tk.decode(a.getIds(), false),
        decoded_skip_special: await tk.decode(b.getIds(), true),
      });
    }
    fs.writeFileSync(path.join(dir, f.replace(/\.json$/, '.cases.json')), JSON.stringify(out, null, 0) + '\n');
    console.log(f, out.length);
  }
})();
