#!/usr/bin/env bash
# Executes every notebook in notebooks/ headlessly with real Jupyter kernels
# and fails on any cell error or any expected figure missing from the
# outputs (notebooks/nbcheck). Called by .ci/run after the Go tests.
#
#   GoNB         runs every *.ipynb except *-gophernotes.ipynb
#   gophernotes  runs *-gophernotes.ipynb (through notebooks/client and the probe binary)
#
# Each run starts from an empty working directory (PROBE_NB_WORK), so nothing
# a previous run generated is reused. The executed notebooks and the kernels'
# logs are kept in $PROBE_NB_OUT (default: a new folder under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
CACHE=${PROBE_NB_CACHE:-$HOME/.cache/probe-notebooks}
OUT=${PROBE_NB_OUT:-$(mktemp -d /tmp/probe-notebooks.XXXXXX)}
mkdir -p "$OUT/bin"
rm -rf "$OUT/work"
export PROBE_NB_WORK=$OUT/work
start=$SECONDS

for cmd in jupyter jupyter-nbconvert; do
  command -v "$cmd" >/dev/null || { echo "ci-notebooks: $cmd not found (Debian jupyter-nbconvert; see .ci/setup.sh)" >&2; exit 1; }
done
bash scripts/notebook-kernels.sh
[ -x "$CACHE/gophernotes/bin/gophernotes-kernel" ] \
  || { echo "ci-notebooks: the gophernotes kernel is not installed (needs ../shared/tools/setup-gophernotes.sh)" >&2; exit 1; }

# The tools the notebooks and the checks use, built with this repository's Go.
go build -o "$OUT/bin/probe" ./cmd/probe
go build -o "$OUT/bin/nbcheck" ./notebooks/nbcheck
export PROBE_BIN=$OUT/bin/probe

# Committed notebooks: known kernels, no stored outputs, figure cells tagged.
notebooks=()
for nb in notebooks/*.ipynb; do
  case $nb in *.out.ipynb) ;; *) notebooks+=("$nb") ;; esac # executed copies are not notebooks to run
done
"$OUT/bin/nbcheck" -lint "${notebooks[@]}"

# The gophernotes client module: vet and test with this Go, and vet with the
# kernel's own toolchain (go1.19.13), which must compile it.
(cd notebooks/client && go vet ./... && go test -count=1 ./...)
gn_goroot=$(GOTOOLCHAIN=go1.19.13 GOPATH="$CACHE/gophernotes/gopath" go env GOROOT)
(cd notebooks/client && GOTOOLCHAIN=local GOPATH="$CACHE/gophernotes/gopath" GOCACHE="$CACHE/gophernotes/gocache" \
  "$gn_goroot/bin/go" vet ./...)

# run NOTEBOOK KERNEL JUPYTER_PATH: execute one notebook and check its outputs.
run() {
  local nb=$1 kernel=$2 jpath=$3 name t0
  name=$(basename "$nb" .ipynb)
  t0=$SECONDS
  if ! PATH="$CACHE/bin:$PATH" JUPYTER_PATH="$jpath" jupyter nbconvert --to notebook --execute "$nb" \
      --ExecutePreprocessor.kernel_name="$kernel" --ExecutePreprocessor.timeout=300 \
      --output-dir "$OUT" --output "$name.out" >"$OUT/$name.log" 2>&1; then
    grep -v '^I[0-9]' "$OUT/$name.log" | tail -40
    echo "ci-notebooks: $nb failed with $kernel (executed copy and log in $OUT)" >&2
    return 1
  fi
  "$OUT/bin/nbcheck" "$OUT/$name.out.ipynb"
  echo "  $name: $((SECONDS - t0)) s ($kernel)"
}

failed=0
for nb in "${notebooks[@]}"; do
  case $nb in
    *-gophernotes.ipynb) run "$nb" gophernotes "$CACHE/gophernotes/jupyter" || failed=1 ;;
    *) run "$nb" gonb "$CACHE/jupyter" || failed=1 ;;
  esac
done
echo "ci-notebooks: $((SECONDS - start)) s in all; executed notebooks in $OUT"
exit $failed
