#!/usr/bin/env bash
# Sourced by scripts/test.sh and scripts/run.sh: the Debian packages the build
# and the tests need, and `install_packages`, which installs the missing ones
# (apt-get update only when something is missing).
# Debian package names of everything the build and the tests need.
packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev catch2 libcurl4-openssl-dev pkg-config libcli11-dev
  libxxhash-dev libopenmpi-dev openmpi-bin)
# Only the tests: the browser the report's page is rendered in and PyTorch for the KernelBench
# importer's test (each test skips without its package).
test_packages=(chromium python3-torch)

# install_packages [extra package...]: installs the missing ones of packages and the extras.
install_packages() {
  if ! command -v dpkg-query >/dev/null; then
    echo "specgen: not a Debian system; make sure these (or equivalents) are installed: ${packages[*]} $*" >&2
    return
  fi
  local missing=() p
  for p in "${packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0

  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null ||
      { echo "specgen: missing packages (${missing[*]}) and not root, no sudo; install them or use --no-install" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "specgen: installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

