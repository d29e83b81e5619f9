"""``python -m macprof.store.schema``: writes runlog.schema.json, generated from the record types."""

from macprof.store.schema import write

print(f"wrote {write()}")
