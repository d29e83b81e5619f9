"""ggml's words that more than the llama.cpp adapter reads (collect/macos.py reads the GPU's
working set through them, in a child process): here, beside the adapters, with no import of
llama_cpp, so reading them loads no engine."""

from __future__ import annotations

# enum ggml_backend_dev_type in ggml-backend.h's order (tests/test_macos.py reads the installed
# header): CPU, GPU (dedicated memory), IGPU (integrated, host memory), ACCEL (BLAS, AMX: used
# beside the CPU backend), META (wraps devices for tensor parallelism). A ggml from before IGPU
# had ACCEL at 2, so a 2 is not read as a GPU: only GPU is.
GGML_DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")
GGML_DEVICE_GPU = GGML_DEVICE_TYPES.index("GPU")
