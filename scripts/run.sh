#!/usr/bin/env bash
# The quick start: install what is missing (Debian 12), build specgen-run and
# run it. With no arguments it runs the bundled replay corpus on the simulated
# device in virtual time; any arguments go to specgen-run (try --help).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${SPECGEN_BUILD_DIR:-$repo/build}
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"
install_packages
# Configure output stays visible: a failing configure must say why.
cmake -S "$repo" -B "$build_dir" -G Ninja
cmake --build "$build_dir" --target specgen-run
exec "$build_dir/examples/specgen-run" "$@"
