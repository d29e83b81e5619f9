"""`macprof models`: what each model the local stores hold would give on this machine, from
metadata alone: its declared quantization, parameters and size, the decode ceiling at the
published and at the measured bandwidth (the weight bytes read per token, as `macprof
estimate` reads them), and whether its files fit in the memory available now. The bandwidth
probe is never run here: its cached result (`macprof bandwidth`, `macprof run`) is used when
there is one, and the measured ceiling is "not measured" otherwise."""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import sys
from pathlib import Path

from macprof.collect.resolve import ENGINE_OF, Resolved, model_name
from macprof.collect.stores import Entry
from macprof.errors import MacprofError


def bandwidths() -> dict:
    """Published and measured bandwidth of this machine, each with its source or why it is unknown."""
    from macprof.collect import chips, probes
    from macprof.model.chips import spec_bandwidth

    chip = gpu_cores = None
    if sys.platform == "darwin":
        hw = chips.detect()
        chip, gpu_cores = hw["chip"], hw["gpu_cores"]
    spec = spec_bandwidth(chip, gpu_cores)
    if chip is None:
        spec["reason"] = "not an Apple Silicon chip: no published unified-memory bandwidth"
    out = {"chip": chip, "gpu_cores": gpu_cores, "published_gbs": spec["gbs"],
           "published_source": spec["source"] or spec["reason"], "measured_gbs": None,
           "measured_source": "not measured (`macprof bandwidth` measures it; `macprof models` never runs the probe)"}
    found = probes.read_cache()
    if found is not None and found[0].get("median_gbs"):
        result, when = found
        stamp = dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        out.update(measured_gbs=result["median_gbs"],
                   measured_source=f"probe of {stamp} ({result.get('device')}: {result.get('method')})")
    return out


def select(entries: list[Entry], patterns: tuple[str, ...] | list[str]) -> list[Entry]:
    """The entries whose reference (or name) matches one of the glob patterns; all without any."""
    if not patterns:
        return list(entries)
    return [e for e in entries if any(fnmatch.fnmatchcase(s.lower(), p.lower()) for p in patterns
                                      for s in (e.ref, name_of(e)))]


def name_of(e: Entry) -> str:
    return model_name(Resolved(e.ref, "path" if e.store == "folder" or e.ref == str(e.path) else e.store,
                               e.path, e.format))


def row(e: Entry, bw: dict, available: int, total: int, gpu: tuple[int | None, str | None] = (None, None)) -> dict:
    """One model's figures; what its metadata cannot give is null, with the reason in ``note``."""
    from macprof.analyse import estimate as est
    from macprof.collect import modelinfo
    from macprof.measure import fit

    out: dict = {"ref": e.ref, "name": name_of(e), "store": e.store, "engine": ENGINE_OF[e.format],
                 "path": str(e.path), "quant": None, "n_params": None, "file_bytes": None,
                 "weight_bytes_per_token": None, "ceiling_published_tok_s": None, "ceiling_measured_tok_s": None,
                 "fits": None, "note": None}
    if e.problem:  # a store's entry that names no readable model (a broken manifest): its row says why
        out["note"] = e.problem
        return out
    try:
        info = modelinfo.inspect(e.path)
        for key, gbs in (("ceiling_published_tok_s", bw["published_gbs"]), ("ceiling_measured_tok_s", bw["measured_gbs"])):
            if gbs:
                out[key] = est.estimate(model=est.ModelFile(e.path, info), bandwidth_gbs=gbs)["ceiling_tok_s_no_context"]
    except MacprofError as exc:
        out["note"] = str(exc)
        return out
    out.update(quant=info.quant, n_params=info.n_params, file_bytes=info.file_bytes,
               weight_bytes_per_token=info.weight_bytes_per_token)
    limit, what = fit.memory_limit(out["engine"], available=available, working_set=gpu[0], working_set_source=gpu[1],
                                   memory_bytes=total)
    refusal = fit.memory_refusal(info.file_bytes, limit, what)
    out["fits"] = refusal is None
    if info.file_bytes > total:
        out["note"] = f"its files ({info.file_bytes / 1e9:.1f} GB) exceed this machine's {total / 1e9:.1f} GB of memory"
    elif refusal:
        out["note"] = refusal.removesuffix(" (use --force to try anyway)")
    return out


def catalog(entries: list[Entry], searched: list[str]) -> dict:
    import psutil

    vm = psutil.virtual_memory()
    bw = bandwidths()
    gpu: tuple[int | None, str | None] = (None, None)
    if sys.platform == "darwin":  # the GPU engines are bound by Metal's working set, not "available"
        from macprof.collect import macos

        gpu = macos.gpu_working_set()
    return {"bandwidth": bw, "available_bytes": vm.available, "memory_bytes": vm.total, "searched": searched,
            "gpu_working_set_bytes": gpu[0], "rows": [row(e, bw, vm.available, vm.total, gpu) for e in entries]}


# -- --write models.toml -----------------------------------------------------------------------
def _toml_str(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, less DEL, which TOML wants escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def config_text(rows: list[dict]) -> str:
    lines = ["# Written by `macprof models --write`: the models selected, each at the path its reference",
             "# resolved to. Add [settings] (see README.md) or per-model settings as for any models.toml.", ""]
    names: set[str] = set()
    for r in rows:
        name, n = r["name"], 1
        while name in names:
            n += 1
            name = f"{r['name']}-{n}"
        names.add(name)
        lines += ["[[models]]", f"# from {_toml_str(r['ref'])[1:-1]} ({r['store']})", f"name = {_toml_str(name)}",
                  f"engine = {_toml_str(r['engine'])}", f"path = {_toml_str(r['path'])}"]
        if r["quant"]:
            lines.append(f"quant = {_toml_str(r['quant'])}")
        lines.append("")
    return "\n".join(lines)


def write_config(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Write the config, refusing to replace a file unless ``overwrite``; it must load as one."""
    from macprof import config

    if not rows:
        raise MacprofError(f"{path}: no model selected: nothing to write")
    if path.exists() and not overwrite:
        raise MacprofError(f"{path}: a file is already there: it is never overwritten; pass --force-overwrite "
                           f"to replace it, or choose another path")
    try:
        with open(path, "w" if overwrite else "x", encoding="utf-8") as fh:
            fh.write(config_text(rows))
    except OSError as exc:
        raise MacprofError(f"{path}: cannot write: {exc.strerror}") from None
    config.load(path, check_engines=False)  # what was written reads back as a config
