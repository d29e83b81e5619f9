"""The words measure's models are keyed by, declared here with no import, so that the settings'
choices (--kv-type, --parallel: config/settings.py, config/dist.py) load none of the math."""

KV_TYPES = ("f16", "q8_0", "q4_0")  # the K/V cache types kvmodel.py computes bytes for (llama.cpp type_k/type_v, MLX kv_bits)
PARALLEL = ("tensor", "pipeline")  # the layouts distributed.py computes a group's ceiling for
