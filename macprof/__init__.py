"""macprof: honest profiling of local LLM inference on Apple Silicon (and Linux CPUs)."""

__version__ = "0.1.0"
