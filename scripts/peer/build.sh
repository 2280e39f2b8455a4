#!/usr/bin/env bash
# Build depth-anything.cpp's da3-cli (the C++/ggml peer that scripts/compare_pytorch
# --peer times) and record what it was built from beside it (da3-cli.source).
#
#   scripts/peer/build.sh SRC BUILD
#
# SRC is a depth-anything.cpp checkout with its ggml submodule (if SRC does not exist,
# it is cloned: git clone --recursive https://github.com/mudler/depth-anything.cpp).
# Built as its README says (CMake, Release, its default CPU options: tinyBLAS, native
# ISA), with ninja when there is one. $PEER_SOURCE overrides the recorded revision
# (for sources that are not a git checkout).
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 SRC BUILD" >&2; exit 2; }
src=$1 build=$2
if [[ ! -d $src ]]; then
    git clone --recursive https://github.com/mudler/depth-anything.cpp "$src"
fi
[[ -f $src/CMakeLists.txt && -f $src/third_party/ggml/CMakeLists.txt ]] || {
    echo "$src: not a depth-anything.cpp checkout with third_party/ggml" >&2; exit 1; }
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DDA_BUILD_CLI=ON
cmake --build "$build" -j "$(nproc)"
cli=$build/examples/cli/da3-cli
if [[ -n ${PEER_SOURCE:-} ]]; then
    source=$PEER_SOURCE
elif git -C "$src" rev-parse HEAD > /dev/null 2>&1; then
    source="depth-anything.cpp $(git -C "$src" rev-parse --short=12 HEAD)"
    source+=", ggml $(git -C "$src/third_party/ggml" rev-parse --short=12 HEAD)"
else
    source="depth-anything.cpp (not a git checkout: revision unknown)"
fi
echo "$source" > "$cli.source"
echo "$cli ($source)"
