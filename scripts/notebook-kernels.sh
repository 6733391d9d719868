#!/usr/bin/env bash
# Installs the two Go Jupyter kernels that run notebooks/*.ipynb, outside the
# repository (nothing here is committed), and is a fast no-op when they are
# already installed:
#
#   $CACHE/bin/gonb, $CACHE/bin/goimports  GoNB v0.11.4 and goimports v0.44.0,
#                                          pinned by the tool module notebooks/tools
#   $CACHE/jupyter/kernels/gonb            GoNB's kernelspec (gonb --install)
#   $CACHE/gophernotes/                    gophernotes v0.7.5 built with go1.19.13 and
#                                          its kernelspec (../shared/tools/setup-gophernotes.sh)
#
# CACHE is $PROBE_NB_CACHE, default ~/.cache/probe-notebooks. Jupyter itself
# (Debian jupyter-nbconvert etc.) is installed by .ci/setup.sh. Use them with:
#
#   PATH=$CACHE/bin:$PATH JUPYTER_PATH=$CACHE/jupyter:$CACHE/gophernotes/jupyter jupyter notebook
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${PROBE_NB_CACHE:-$HOME/.cache/probe-notebooks}
mkdir -p "$CACHE/bin"

# GoNB and goimports, rebuilt when the tool module's pins change.
stamp=$(cat notebooks/tools/go.mod notebooks/tools/go.sum | sha256sum | cut -c1-16)
if [ "$(cat "$CACHE/bin/.tools-stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$CACHE/bin/gonb" ] || [ ! -x "$CACHE/bin/goimports" ]; then
  echo "notebook kernels: building GoNB and goimports (notebooks/tools)"
  (cd notebooks/tools && GOBIN="$CACHE/bin" go install tool)
  echo "$stamp" > "$CACHE/bin/.tools-stamp"
  rm -f "$CACHE/jupyter/kernels/gonb/kernel.json"
fi
if [ ! -f "$CACHE/jupyter/kernels/gonb/kernel.json" ]; then
  # --raw_error: plain-text errors in the outputs (readable in CI logs).
  PATH="$CACHE/bin:$PATH" JUPYTER_DATA_DIR="$CACHE/jupyter" "$CACHE/bin/gonb" --install --force_deps --raw_error \
    >"$CACHE/gonb-install.log" 2>&1 && test -f "$CACHE/jupyter/kernels/gonb/kernel.json" \
    || { cat "$CACHE/gonb-install.log"; echo "gonb --install failed" >&2; exit 1; }
  echo "notebook kernels: GoNB kernelspec in $CACHE/jupyter/kernels/gonb"
fi

# gophernotes, built by the shared recipe (Go 1.19.13 toolchain fetched by the go command).
GN=$CACHE/gophernotes
if [ ! -x "$GN/bin/gophernotes-kernel" ] || [ ! -f "$GN/jupyter/kernels/gophernotes/kernel.json" ]; then
  recipe=../shared/tools/setup-gophernotes.sh
  if [ -f "$recipe" ]; then
    echo "notebook kernels: building gophernotes ($recipe)"
    ROOT="$GN" bash "$recipe" >"$CACHE/gophernotes-setup.log" 2>&1 \
      || { tail -20 "$CACHE/gophernotes-setup.log"; echo "gophernotes setup failed (log: $CACHE/gophernotes-setup.log)" >&2; exit 1; }
  else
    echo "notebook kernels: $recipe not found; gophernotes not installed (GoNB runs every notebook)" >&2
  fi
fi
