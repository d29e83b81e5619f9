#!/usr/bin/env bash
# Builds llama-perplexity from the llama.cpp sources that the installed llama-cpp-python vendors,
# exactly as build_llama_bench.sh builds llama-bench (same sdist, same GGML_NATIVE=OFF on Linux,
# same build folder: where llama-bench was built, only tools/perplexity is compiled). Prints the
# binary's path, for benchmarks/quality_check.py.
set -euo pipefail
LLAMA_TARGET=llama-perplexity exec "$(dirname "$0")/build_llama_bench.sh" "$@"
