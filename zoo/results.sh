#!/usr/bin/env bash
# Perplexity vs context length of the zoo's token models on the held-out
# Brown text (RFA Table 1's protocol at small scale), with BFT's Prediction 3
# on the gated model, written to zoo/results/ (tables, manifest and a static
# report). Needs zoo/prepare.sh's zoo/build/data/heldout.ids.json.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=zoo/results
go build -o zoo/build/probe ./cmd/probe
ck=zoo/checkpoints
rm -rf "$OUT/ppl"
zoo/build/probe ppl --model "$ck/qwen3_base,$ck/gated_headwise,$ck/rfa_m1,$ck/rfa_m2_sc" \
  --ids zoo/build/data/heldout.ids.json --lengths 256,512,1024,2048,4096 --samples 4 \
  --gate learned,one,k,k-matched --train-length 256 --format parquet,csv --progress=false --out "$OUT/ppl"
zoo/build/probe report "$OUT/ppl" --static --out "$OUT/report.html"
