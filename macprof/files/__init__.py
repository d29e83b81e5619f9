"""Bounded readers of the files a user names (regular files only, capped; GGUF and safetensors
headers, file digests): they import nothing of macprof but errors, so every layer may use them."""
