"""A model named on the command line -> the file or directory to load, and its format.

A reference is one of (docs/design.md, "Model references"):
- a path: a GGUF file or an MLX model directory (config.json + *.safetensors);
- ``org/repo[:QUANT]`` or ``org/repo/path/in/repo.gguf``: a repo in the Hugging Face hub cache
  (or llama.cpp's -hf cache under LLAMA_CACHE), then in LM Studio's folders; ``hf:`` and
  ``lmstudio:`` prefixes name one kind of store;
- ``ollama:[namespace/]model[:tag]``: through Ollama's manifest to its GGUF blob;
- ``demo:SIZE/VARIANT``: a demo model, as in models.toml.
Nothing is downloaded: a repo that is not in a cache is an error saying where macprof looked
and how to download it. A QUANT picks the GGUF of that quantization: the file whose declared
tag it is, else llama.cpp's own match (``QUANT`` then ``-`` or ``.`` in the name), else the
tags it begins; more than one candidate is an error that lists them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from macprof.collect import stores
from macprof.errors import MacprofError
from macprof.files import filekind

REF_FORMS = ("a GGUF file, an MLX model directory, org/repo[:QUANT] (Hugging Face hub cache), "
             "ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[:QUANT] or demo:SIZE/VARIANT")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(/[^:]+\.gguf)?(:[\w.-]+)?")
_OLLAMA_PART = re.compile(r"[A-Za-z0-9][\w.-]*")
ENGINE_OF = {"gguf": "llama.cpp", "mlx": "mlx"}


@dataclass(frozen=True)
class Resolved:
    ref: str  # as typed
    store: str  # "path", "hf", "llama.cpp", "ollama", "lmstudio", "demo"
    path: Path
    format: str  # "gguf" or "mlx"
    quant: str | None = None  # the quantization the file's name (or the selector) declares
    demo: str | None = None


def resolve(ref: str) -> Resolved:
    text = ref.strip()
    if not text:
        raise MacprofError(f"{ref!r}: an empty model reference (give {REF_FORMS})")
    if text.startswith("demo:"):
        return _demo(text)
    if text.startswith("ollama:"):
        return _ollama(text)
    if text.startswith("lmstudio:"):
        return _repo(text, text.removeprefix("lmstudio:"), hubs=False, lmstudio=True)
    if text.startswith("hf:"):
        return _repo(text, text.removeprefix("hf:"), hubs=True, lmstudio=False)
    path = Path(text).expanduser()
    if os.path.lexists(path):
        return _path(text, path)
    looks_like_a_path = text.startswith((".", "/", "~")) or (text.endswith(".gguf") and text.count("/") < 2)
    if _REPO.fullmatch(text) and not looks_like_a_path:
        return _repo(text, text, hubs=True, lmstudio=True)
    raise MacprofError(f"{text}: no such file or directory, and not a model reference (give {REF_FORMS})")


def _path(ref: str, path: Path) -> Resolved:
    try:
        filekind.model_files(path)  # a FIFO, a device, a dangling link: one line, nothing opened
    except OSError as exc:
        raise MacprofError(f"{ref}: {exc.strerror}") from None
    if path.is_dir():
        if not stores.is_mlx_dir(path):
            raise MacprofError(f"{ref}: a directory but not an MLX model (no config.json and *.safetensors)")
        return Resolved(ref, "path", path, "mlx")
    if not stores.is_gguf(path):
        raise MacprofError(f"{ref}{filekind.linked(path)}: not a GGUF file (it does not begin with the GGUF magic)")
    return Resolved(ref, "path", path, "gguf", stores.quant_tag(path.name))


def served_model(model: str, api: str) -> tuple[str, str] | None:
    """Where a server's model id names a model of the local stores (a path, a Hugging Face repo,
    an Ollama name): (its path, how it was found), whose tokenizer gives a server's run exact
    prompt lengths; None otherwise, or for the chat API (a chat template adds tokens of its own)."""
    if api == "chat":
        return None
    for ref in (model, *(("ollama:" + model,) if api == "ollama" else ())):
        try:
            found = resolve(ref)
        except (MacprofError, OSError):
            continue
        return str(found.path), f"{found.path} (the server's model id resolved through the model stores: {found.store})"
    return None


def _demo(ref: str) -> Resolved:
    from macprof.config import resolve_path
    from macprof.demo.build import VARIANTS

    try:
        path, demo = resolve_path(ref, Path.cwd() / "models.toml")
    except ValueError as exc:
        raise MacprofError(f"{ref}: {exc}") from None
    engine = next(e for suffix, e, _, _ in VARIANTS if suffix == (demo or "").partition("/")[2])
    return Resolved(ref, "demo", path, "mlx" if engine == "mlx" else "gguf", demo=demo)


# -- repos: the hub caches, then LM Studio ----------------------------------------------------
def _split(body: str) -> tuple[str, str | None, str | None]:
    """``org/repo[/file.gguf][:QUANT]`` -> repo id, file, selector."""
    base, sep, selector = body.rpartition(":")
    if not sep or "/" in selector:
        base, selector = body, ""
    parts = base.split("/")
    return "/".join(parts[:2]), "/".join(parts[2:]) or None, selector or None


def _repo(ref: str, body: str, hubs: bool, lmstudio: bool) -> Resolved:
    if not _REPO.fullmatch(body):
        raise MacprofError(f"{ref}: not a repo reference (expected PUBLISHER/REPO[:QUANT] or PUBLISHER/REPO/FILE.gguf)")
    repo_id, file, selector = _split(body)
    if ".." in repo_id.split("/") or (file and ".." in file.split("/")):
        raise MacprofError(f"{ref}: '..' is not part of a repo reference")
    searched = []
    for store, cache in stores.hub_caches() if hubs else []:
        searched.append(f"{'the Hugging Face hub cache' if store == 'hf' else 'llama.cpp cache'} {cache}")
        repo = stores.hub_repo(cache, repo_id)
        if repo is not None:
            rel = _pick(ref, repo_id, repo.files, file, selector, repo.snapshot)
            return _hub_path(ref, store, cache, repo_id, repo.snapshot, rel, selector)
    for root in stores.lmstudio_roots() if lmstudio else []:
        searched.append(f"LM Studio {root}")
        folder = root / repo_id
        if folder.is_dir():
            rel = _pick(ref, repo_id, stores.repo_files(folder), file, selector, folder)
            return _found(ref, "lmstudio", folder, rel, selector)
    get = f"hf download {repo_id}" + (f' --include "*{selector}*"' if selector else "")
    raise MacprofError(f"{ref}: {repo_id} was not found in {'; nor in '.join(searched)}; macprof downloads nothing: "
                       f"download it first (`{get}`, or in LM Studio) or give the file's path")


def _found(ref: str, store: str, root: Path, rel: str | None, selector: str | None) -> Resolved:
    if rel is None:
        return Resolved(ref, store, root, "mlx")
    return Resolved(ref, store, root / rel, "gguf", stores.quant_tag(rel) or (selector or "").upper() or None)


def _hub_path(ref: str, store: str, cache: Path, repo_id: str, snapshot: Path, rel: str | None,
              selector: str | None) -> Resolved:
    """The hub library's own offline lookups: the snapshot folder of an MLX repo (refused when
    the library knows it is incomplete), the cached file of a GGUF."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    try:
        if rel is None:
            folder = snapshot_download(repo_id, cache_dir=cache, revision=snapshot.name, local_files_only=True)
            return Resolved(ref, store, Path(folder), "mlx")
        found = try_to_load_from_cache(repo_id, rel, cache_dir=cache, revision=snapshot.name)
    except Exception as exc:  # noqa: BLE001 - the library's errors (incomplete snapshot...): one line
        raise MacprofError(f"{ref}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None
    if not isinstance(found, str):
        raise MacprofError(f"{ref}: {rel} is not in the cache of {repo_id} ({cache})")
    return Resolved(ref, store, Path(found), "gguf", stores.quant_tag(rel) or (selector or "").upper() or None)


def _pick(ref: str, repo_id: str, files: tuple[str, ...] | list[str], file: str | None, selector: str | None,
          root: Path) -> str | None:
    """The repo's model: a GGUF's relative path, or None for the MLX directory itself."""
    ggufs = stores.gguf_choices(files)
    if file is not None:
        if file not in files:
            raise MacprofError(f"{ref}: {repo_id} has no file {file} (its GGUF files: {', '.join(ggufs) or 'none'})")
        return file
    choices = stores.repo_entries(repo_id, root, files, "")
    if selector is None:
        if len(choices) == 1:
            return None if choices[0].format == "mlx" else choices[0].path.relative_to(root).as_posix()
        if not choices:
            raise MacprofError(f"{ref}: {repo_id} ({root}) holds no model: no GGUF file and no config.json with "
                               f"*.safetensors (an incomplete download?)")
        raise MacprofError(f"{ref}: {repo_id} holds {len(choices)} models; name one: "
                           f"{', '.join(c.ref for c in choices)}")
    matches = match_quant(selector, ggufs)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        tags = sorted({t for t in map(stores.quant_tag, ggufs) if t})
        raise MacprofError(f"{ref}: {repo_id} has no GGUF of quantization {selector} "
                           f"(its quantizations: {', '.join(tags) or 'none'})")
    named = {e.path.relative_to(root).as_posix(): e.ref for e in choices if e.format == "gguf"}
    raise MacprofError(f"{ref}: the quantization {selector} is ambiguous in {repo_id}: it matches "
                       f"{len(matches)} files; give one of {', '.join(named.get(m, m) for m in matches)}")


def match_quant(selector: str, ggufs: list[str]) -> list[str]:
    """The model GGUFs a quantization selector names (see the module's docstring)."""
    tag = selector.upper()
    exact = [f for f in ggufs if stores.quant_tag(f) == tag]
    if exact:
        return exact
    escaped = re.escape(selector)
    llama = [f for f in ggufs if re.search(escaped + r"[.-]", f, re.IGNORECASE)]
    bounded = [f for f in llama if re.search(r"(^|[-._/])" + escaped + r"[.-]", f, re.IGNORECASE)]
    if bounded or llama:
        return bounded or llama
    return [f for f in ggufs if (stores.quant_tag(f) or "").startswith(tag)]


# -- Ollama ---------------------------------------------------------------------------------
def _ollama(ref: str) -> Resolved:
    name = ref.removeprefix("ollama:")
    host, namespace, model, tag = stores.ollama_parts(name)
    if not all(_OLLAMA_PART.fullmatch(p) for p in (namespace, model, tag)) or ".." in (host, namespace, model, tag) \
            or not re.fullmatch(r"[\w.-]+(:\d+)?", host) or name.count("/") > 2:
        raise MacprofError(f"{ref}: not an Ollama model name ([namespace/]model[:tag], e.g. ollama:qwen3:8b)")
    roots = stores.ollama_roots()
    found = [(root, root / "manifests" / host / namespace / model / tag) for root in roots]
    root, manifest = next(((r, m) for r, m in found if m.is_file()), found[0])
    if not manifest.is_file():
        raise MacprofError(f"{ref}: Ollama has no manifest {manifest} (its store: {' or '.join(map(str, roots))}; "
                           f"OLLAMA_MODELS moves it); pull the model first: `ollama pull {name}`")
    blob = stores.ollama_blob(root, manifest)
    if not stores.is_gguf(blob):
        raise MacprofError(f"{ref}: its model blob {blob} is not a GGUF file")
    return Resolved(ref, "ollama", blob, "gguf")  # its quantization: the file's own declaration (inspect)


# -- references -> the models of a run -----------------------------------------------------------
def model_name(r: Resolved) -> str:
    """A stable name, safe in a file name: a path's file or folder name, else the reference
    (``mlx-community/Qwen3-4B-4bit`` -> mlx-community-Qwen3-4B-4bit, ``ollama:qwen3:8b`` -> ollama-qwen3-8b)."""
    if r.store == "path":
        base = r.path.stem if r.format == "gguf" else r.path.resolve().name
    elif r.store == "demo":
        base = f"demo-{(r.demo or '').replace('/', '-')}"
    else:
        base = r.ref.removeprefix("hf:").removeprefix("lmstudio:").removesuffix(".gguf")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.")[:100]
    return name or "model"


def specs(refs: list[str] | tuple[str, ...], engine: str | None, settings, check_engines: bool = True) -> tuple:
    """ModelSpecs for references named on the command line, as models.toml entries would be:
    the engine follows from the format unless ``engine`` is given; names are made unique in
    the order given (``-2``, ``-3``), so the same command line gives the same names again."""
    from macprof import engines
    from macprof.config import ModelSource, ModelSpec

    out: list = []
    seen: dict[tuple[str, Path], str] = {}
    for ref in refs:
        r = resolve(ref)
        eng = engine or ENGINE_OF[r.format]
        if engine is not None and engines.MODEL_FORMAT[eng] != r.format:
            what = "a GGUF file" if engines.MODEL_FORMAT[eng] == "gguf" else "an MLX model directory"
            raise MacprofError(f"{ref}: --engine {eng} needs {what}; this is {'a GGUF file' if r.format == 'gguf' else 'an MLX model directory'}")
        if check_engines and not engines.is_installed(eng):
            raise MacprofError(f"{ref}: engine {eng!r} is not installed: pip install {engines.ENGINES[eng][2]}")
        key = (eng, r.path.resolve())
        if key in seen:
            raise MacprofError(f"{ref}: the same model as {seen[key]} (named twice)")
        seen[key] = ref
        base = name = model_name(r)
        taken = {m.name for m in out}
        n = 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        out.append(ModelSpec(name, eng, r.path, r.quant, settings, r.demo, ModelSource(ref, r.store)))
    return tuple(out)
