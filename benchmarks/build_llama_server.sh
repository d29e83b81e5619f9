#!/usr/bin/env bash
# Builds llama-server, llama.cpp's own HTTP server (what `brew install llama.cpp` puts on PATH on
# a Mac), from the llama.cpp sources that the installed llama-cpp-python vendors, exactly as
# build_llama_bench.sh builds llama-bench (same sdist, same GGML_NATIVE=OFF on Linux, same build
# folder). About 10 minutes on 2 cores, once: the build folder is the cache, by default
# ${TMPDIR:-/tmp}/llama-bench-VERSION/llama_cpp_python-VERSION/vendor/llama.cpp/build (give another
# work folder as the first argument). Prints the binary's path. `macprof run --serve llama-server`
# runs the llama-server found on PATH; tests/test_server_real.py also looks in that default folder
# (or at $MACPROF_LLAMA_SERVER) and skips, saying so, where there is none.
set -euo pipefail
LLAMA_TARGET=llama-server exec "$(dirname "$0")/build_llama_bench.sh" "$@"
