#!/usr/bin/env bash
# Installs what the project needs: Go modules pinned in go.mod (downloaded
# through the module proxy). Debian and npm packages are added here as the
# features that need them land.
set -euo pipefail
cd "$(dirname "$0")/.."
go version
go mod download
