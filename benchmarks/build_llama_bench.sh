#!/usr/bin/env bash
# Builds llama-bench from the llama.cpp sources that the installed llama-cpp-python vendors
# (its sdist, from the package index), with the same GGML_NATIVE=OFF as the wheel on Linux.
# Prints the binary's path, for `macprof overhead --llama-bench PATH`. About 8 minutes on 2 cores.
# LLAMA_TARGET names another of llama.cpp's tools to build the same way (build_llama_perplexity.sh).
set -euo pipefail
version=$(python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
work=${1:-${TMPDIR:-/tmp}/llama-bench-$version}
mkdir -p "$work" && cd "$work"
[ -f "llama_cpp_python-$version.tar.gz" ] || python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d .
[ -d "llama_cpp_python-$version" ] || tar xzf "llama_cpp_python-$version.tar.gz"
cd "llama_cpp_python-$version/vendor/llama.cpp"
native=ON; [ "$(uname -s)" = Linux ] && native=OFF
target=${LLAMA_TARGET:-llama-bench}
# llama-server is configured in only when asked for (build_llama_server.sh), into the same build
# folder: without its web UI (no download of prebuilt assets) and without OpenSSL (loopback HTTP only)
server=OFF; [ "$target" = llama-server ] && server=ON
if [ ! -f build/CMakeCache.txt ] || { [ $server = ON ] && ! grep -q '^LLAMA_BUILD_SERVER:BOOL=ON' build/CMakeCache.txt; }; then
  cmake -B build -DGGML_NATIVE=$native -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=$server -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build --target "$target" -j"$(getconf _NPROCESSORS_ONLN)" >/dev/null
echo "$PWD/build/bin/$target"
