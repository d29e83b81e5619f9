"""The kinds of what a string field of the run log holds, which decide what `macprof share`
removes (store/share.py): each record declares its string fields' kinds beside its fields, in
``KINDS`` (model/records.py Record), so a field and its kind are written in one place, and
model/kinds.py walks them.

The kinds, and what `share` does with each:


- VOCAB: what macprof, the OS or the hardware names (a status, a method, the chip, a hash, a
  time, a version): kept as is. A user named "M4" must not take the chip's name apart.
- TEXT: free text that may quote anything (an engine's message, a stderr tail, a server's
  report) and every string inside a free-form value (engine_versions, software, a server's
  timings): paths lose their folders, URLs their credentials and query, and this machine's
  home directory, user name and host name go wherever they stand.
- OWN: macprof's own sentences about what the OS or a library did not give: treated as TEXT
  but for the user and host names (a host named "vm" leaves "(a VM reports none)" alone); a
  path or URL such a sentence quotes still goes.
- NAME: a model's name or a file's, which may come from a path (a file's stem, the id a
  server lists, which llama-cpp-python makes the model's full path): treated as TEXT.
- REF: a model reference as typed: one that is a path becomes ``<path of NAME>``; a store's
  reference (``org/repo:Q4_K_M``, ``ollama:ns/model``) is how others find the model, and is
  treated as TEXT.
- PATH: a file's path (the quality text): its folders go, its file name stays.
- MODEL_PATH: a model's path: removed (null); the model stays identified by its files' names,
  sizes and sha256, and the path, wherever it is quoted, becomes ``<path of NAME>``.
- HOST: a rank's host (user@host): ``<host N>``, wherever it stands; loopback is kept.
- HOST_ID: the short hash of a host name: removed (null).
"""

VOCAB, TEXT, OWN, NAME, REF = "vocabulary", "text", "own message", "model name", "model reference"
PATH, MODEL_PATH, HOST, HOST_ID = "path", "model path", "host", "host id"
KINDS = (VOCAB, TEXT, OWN, NAME, REF, PATH, MODEL_PATH, HOST, HOST_ID)
