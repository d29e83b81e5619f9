"""Constants of the run-log contract, shared by the stages that write and read it."""

SCHEMA_VERSION = 3  # 2: measured/spec bandwidth, per-phase roofline; 3: grid / depth / batch sweeps


# A divergence between the cached and the uncached output at a position where the top-2
# logits differ by less than this is a legitimate floating-point near-tie, not a failure.
NEAR_TIE_LOGITS = 0.1

# The most of a run log or journal read whole (show, compare, --resume, the journal's repair on
# reopening), through the one reader (files/filekind.py): a long run's journal is some hundreds of
# MB; a FIFO or a device named as a log is refused at once
MAX_LOG_BYTES = 1 << 30
