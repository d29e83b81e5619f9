#!/usr/bin/env bash
# Builds llama-perplexity from the llama.cpp sources that the installed llama-cpp-python vendors,
# as build_llama_bench.sh builds llama-bench (same sdist, same GGML_NATIVE=OFF on Linux, same
# build folder: where llama-bench was built, only tools/perplexity is compiled). Prints the
# binary's path, for benchmarks/quality_check.py.
set -euo pipefail
version=$(python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
work=${1:-${TMPDIR:-/tmp}/llama-bench-$version}
mkdir -p "$work" && cd "$work"
[ -f "llama_cpp_python-$version.tar.gz" ] || python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d .
[ -d "llama_cpp_python-$version" ] || tar xzf "llama_cpp_python-$version.tar.gz"
cd "llama_cpp_python-$version/vendor/llama.cpp"
native=ON; [ "$(uname -s)" = Linux ] && native=OFF
[ -f build/CMakeCache.txt ] || cmake -B build -DGGML_NATIVE=$native -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target llama-perplexity -j"$(getconf _NPROCESSORS_ONLN)" >/dev/null
echo "$PWD/build/bin/llama-perplexity"
