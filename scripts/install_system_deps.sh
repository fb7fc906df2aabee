#!/usr/bin/env bash
# System packages the stack needs that PyPI does not ship. Installs only what is missing; needs root (or sudo)
# the first time. Everything else comes from pyproject.toml.
set -euo pipefail
packages=(postgresql mariadb-server chromium fonts-dejavu-core)  # Debian package names (the two database servers: ExeSQL tests; chromium: the run viewer's browser tests and the Browser component; fonts-dejavu-core: DocGenerator's PDF font)
missing=()
for pkg in "${packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing system packages: ${missing[*]}"
$sudo apt-get update -qq
$sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
