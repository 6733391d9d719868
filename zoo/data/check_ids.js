// Checks that the Go tokenizer's ids for train.txt and heldout.txt equal the
// real HF tokenizers' ids (npm @anush008/tokenizers):
//   node check_ids.js <data dir>
'use strict';
const path = require('path');
const fs = require('fs');
const T = require(path.join(__dirname, '../../third_party/hftok/node_modules/@anush008/tokenizers'));

(async () => {
  const dir = process.argv[2];
  const tok = T.Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  for (const part of ['train', 'heldout']) {
    const want = (await tok.encode(fs.readFileSync(path.join(dir, part + '.txt'), 'utf8'))).getIds();
    const got = JSON.parse(fs.readFileSync(path.join(dir, part + '.ids.json'), 'utf8'));
    let i = 0;
    while (i < want.length && i < got.length && want[i] === got[i]) i++;
    if (i !== want.length || i !== got.length) {
      throw new Error(`${part}: Go ids differ from the oracle's at ${i} (lengths ${got.length}, ${want.length})`);
    }
    console.log(`${part}: ${got.length} ids, equal to the oracle's`);
  }
})().catch((e) => { console.error(e.message); process.exit(1); });
