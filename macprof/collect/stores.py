"""Where local model stores keep their models, and what each holds: the Hugging Face hub cache,
llama.cpp's download cache, Ollama's store, LM Studio's models folders, and folders given.

Each store is read as its own tool writes it:
- hub cache: huggingface_hub's own location (HF_HOME, HF_HUB_CACHE, through the library's
  constants) and its own scan (``scan_cache_dir``): ``models--org--name/snapshots/<commit>``,
  ``refs/main`` naming the commit;
- llama.cpp: ``-hf`` downloads go to a hub-layout cache, rooted at LLAMA_CACHE when it is set
  and at the hub cache otherwise (common/hf-cache.cpp); ``-mu`` URLs and older versions wrote
  flat files to ``fs_get_cache_directory()``: LLAMA_CACHE, else ~/Library/Caches/llama.cpp on
  macOS and $XDG_CACHE_HOME (or ~/.cache) + /llama.cpp elsewhere (common/common.cpp);
- Ollama: OLLAMA_MODELS, else ~/.ollama/models and, where it exists, /usr/share/ollama/.ollama/models
  (Linux's service install runs the server as the user ``ollama`` whose home that is); ``manifests/<host>/<namespace>/<model>/<tag>``
  (JSON) whose layer of mediaType ``application/vnd.ollama.image.model`` names the GGUF blob
  ``blobs/sha256-<hex>``;
- LM Studio: its settings' ``downloadsFolder`` (~/.lmstudio/settings.json), ~/.lmstudio/models
  and the legacy ~/.cache/lm-studio/models; ``publisher/repo/file.gguf`` or an MLX ``publisher/repo/``.
Only metadata is read here: no weight, no network.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from macprof.errors import MacprofError
from macprof.files import filekind

OLLAMA_HOST, OLLAMA_NAMESPACE, OLLAMA_TAG = "registry.ollama.ai", "library", "latest"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
# files of a GGUF repo that are not a model to run (llama.cpp's gguf_filename_is_model)
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
MAX_MANIFEST = 1 << 20
FOLDER_DEPTH = 6  # how deep a folder given to `macprof models` is searched
REPO_DEPTH = 4  # how deep an LM Studio repo folder is searched (its files sit one or two levels down)
# Directory entries one folder or repo is read for, at most: a store's entry linked to /usr walked
# all of it, and links to "." made the visits grow as (links)^depth. Every directory is also read
# once however many links lead to it (by device and inode).
WALK_ENTRIES = 20_000


@dataclass(frozen=True)
class Entry:
    """One model a store holds: ``ref`` is what `macprof run` takes to name it."""

    ref: str
    store: str  # "hf", "llama.cpp", "ollama", "lmstudio", "folder"
    path: Path  # a GGUF file or an MLX model directory (a manifest that names none: ``problem``)
    format: str  # "gguf" or "mlx"
    problem: str | None = None  # why this entry names no model it can read (a broken Ollama manifest)


# -- locations ---------------------------------------------------------------------------
def hub_cache() -> Path:
    """The hub cache huggingface_hub itself uses (HF_HUB_CACHE, HF_HOME/hub, ...)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def llama_cache() -> Path:
    """llama.cpp's fs_get_cache_directory()."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"]).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama.cpp"


def hub_caches() -> list[tuple[str, Path]]:
    """The hub-layout caches a repo id is looked up in: the hub cache, and llama.cpp's -hf
    cache when LLAMA_CACHE moves it elsewhere."""
    out = [("hf", hub_cache())]
    if os.environ.get("LLAMA_CACHE") and llama_cache().resolve() != out[0][1].resolve():
        out.append(("llama.cpp", llama_cache()))
    return out


# Ollama's Linux install script (scripts/install.sh) creates a system user ``ollama`` with this
# home and runs the server as it: its pulls land here, not in the invoking user's home
OLLAMA_SERVICE_ROOT = Path("/usr/share/ollama/.ollama/models")


def ollama_roots() -> list[Path]:
    """Where Ollama keeps models: OLLAMA_MODELS alone when set (the server reads only it), else
    the user's ~/.ollama/models, then the service install's store where one exists."""
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.environ["OLLAMA_MODELS"]).expanduser()]
    roots = [Path.home() / ".ollama" / "models"]
    if OLLAMA_SERVICE_ROOT.is_dir():
        roots.append(OLLAMA_SERVICE_ROOT)
    return roots


def lmstudio_roots() -> list[Path]:
    """LM Studio's models folders: the one its settings name first, then the defaults."""
    roots = []
    try:
        # read as a small regular file: a FIFO there must not block the listing
        settings = json.loads(filekind.read_regular(Path.home() / ".lmstudio" / "settings.json", MAX_MANIFEST,
                                                    "LM Studio's settings"))
        folder = settings.get("downloadsFolder") if isinstance(settings, dict) else None
        if isinstance(folder, str) and folder.strip():
            roots.append(Path(folder).expanduser())
    except (OSError, ValueError, RecursionError, MacprofError):  # none, not JSON, not a file: the defaults
        pass
    roots += [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]
    return list(dict.fromkeys(roots))


def locations(folders: list[Path] | tuple[Path, ...] = ()) -> list[str]:
    """Every place `discover` looks, in words."""
    return ([f"{'Hugging Face hub cache' if kind == 'hf' else 'llama.cpp -hf cache'} {cache}" for kind, cache in hub_caches()]
            + [f"llama.cpp cache {llama_cache()}"] + [f"Ollama {root}" for root in ollama_roots()]
            + [f"LM Studio {root}" for root in lmstudio_roots()] + [f"folder {f}" for f in folders])


# -- what a file is ----------------------------------------------------------------------
def is_gguf(path: Path) -> bool:
    """A regular file that starts with GGUF's magic (an Ollama blob has no suffix)."""
    try:
        with filekind.open_regular(path) as fh:
            return fh.read(4) == b"GGUF"
    except (OSError, MacprofError):  # not a readable regular file: not a GGUF
        return False


def is_mlx_dir(path: Path) -> bool:
    try:
        return (path / "config.json").is_file() and any(p.suffix == ".safetensors" for p in path.iterdir())
    except OSError:
        return False


def split_info(name: str) -> tuple[str, int, int]:
    """llama.cpp's get_gguf_split_info: the name less ``-0000i-of-0000n.gguf``, i and n."""
    prefix = name.removesuffix(".gguf")
    m = _SPLIT.match(prefix)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else (prefix, 1, 1)


def quant_tag(name: str) -> str | None:
    """The quantization a GGUF file's name declares (``model-Q4_K_M.gguf`` -> Q4_K_M), as llama.cpp reads it."""
    m = _TAG.search(split_info(Path(name).name)[0])
    return m.group(1).upper() if m else None


def is_model_gguf(rel: str) -> bool:
    """A model's GGUF (its first shard when split), not a projector, imatrix or draft model."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(n in name for n in _NOT_MODELS) and split_info(name)[1] == 1


# -- the stores ----------------------------------------------------------------------------
def discover(folders: list[Path] | tuple[Path, ...] = ()) -> list[Entry]:
    """Every model of every store, and of the folders given, each once (first store wins)."""
    entries: list[Entry] = []
    for kind, cache in hub_caches():
        entries += hub_entries(cache, kind)
    entries += flat_llama_entries(llama_cache())
    for root in ollama_roots():
        entries += ollama_entries(root)
    for root in lmstudio_roots():
        entries += lmstudio_entries(root)
    for folder in folders:
        entries += folder_entries(Path(folder))
    seen: set[Path] = set()
    out = []
    for e in entries:
        key = e.path.resolve()
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


@dataclass(frozen=True)
class HubRepo:
    repo_id: str
    snapshot: Path
    files: tuple[str, ...]  # paths relative to the snapshot, "/"-separated


def hub_repos(cache: Path) -> list[HubRepo]:
    """The model repos of a hub-layout cache, each at its ``main`` revision (else its newest)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.utils import CacheNotFound

    try:
        info = scan_cache_dir(cache)
    except (CacheNotFound, ValueError, OSError):
        return []
    out = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        rev = max(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        files = tuple(sorted(f.file_path.relative_to(rev.snapshot_path).as_posix() for f in rev.files))
        out.append(HubRepo(repo.repo_id, rev.snapshot_path, files))
    return out


def hub_repo(cache: Path, repo_id: str) -> HubRepo | None:
    return next((r for r in hub_repos(cache) if r.repo_id == repo_id), None)


def gguf_choices(files: tuple[str, ...] | list[str]) -> list[str]:
    return [f for f in files if is_model_gguf(f)]


def repo_entries(prefix: str, root: Path, files: tuple[str, ...] | list[str], store: str) -> list[Entry]:
    """A repo's models: its MLX directory, and each model GGUF named ``prefix:TAG`` (or by
    its file when the repo has one GGUF, or two share a tag)."""
    out = []
    if "config.json" in files and any("/" not in f and f.endswith(".safetensors") for f in files):
        out.append(Entry(prefix, store, root, "mlx"))
    ggufs = gguf_choices(files)
    tags = [quant_tag(f) for f in ggufs]
    for f, tag in zip(ggufs, tags):
        if len(ggufs) == 1 and not out:
            ref = prefix
        elif tag and tags.count(tag) == 1:
            ref = f"{prefix}:{tag}"
        else:
            ref = f"{prefix}/{f}"
        out.append(Entry(ref, store, root / f, "gguf"))
    return out


def hub_entries(cache: Path, store: str = "hf") -> list[Entry]:
    return [e for r in hub_repos(cache) for e in repo_entries(r.repo_id, r.snapshot, r.files, store)]


def flat_llama_entries(cache: Path) -> list[Entry]:
    """GGUF files llama.cpp wrote straight into its cache folder (-mu, older -hf)."""
    try:
        files = sorted(p for p in cache.iterdir() if p.name.endswith(".gguf") and is_model_gguf(p.name))
    except OSError:
        return []
    return [Entry(str(p), "llama.cpp", p, "gguf") for p in files if is_gguf(p)]


# -- Ollama --------------------------------------------------------------------------------
def ollama_parts(name: str) -> tuple[str, str, str, str]:
    """``[host/][namespace/]model[:tag]`` -> (host, namespace, model, tag), Ollama's defaults filled."""
    base, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        base, tag = name, ""
    parts = base.split("/")
    host = parts[-3] if len(parts) >= 3 else OLLAMA_HOST
    namespace = parts[-2] if len(parts) >= 2 else OLLAMA_NAMESPACE
    return host, namespace, parts[-1], tag or OLLAMA_TAG


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The shortest name Ollama shows for a manifest (``qwen3:8b``, ``user/model:tag``)."""
    base = model if (host, namespace) == (OLLAMA_HOST, OLLAMA_NAMESPACE) else \
        f"{namespace}/{model}" if host == OLLAMA_HOST else f"{host}/{namespace}/{model}"
    return f"ollama:{base}:{tag}"


def ollama_blob(root: Path, manifest: Path) -> Path:
    """The GGUF blob a manifest's model layer names; MacprofError when it names none."""
    try:
        data = json.loads(filekind.read_regular(manifest, MAX_MANIFEST, "an Ollama manifest"))
        layers = data["layers"]
        digests = [x["digest"] for x in layers if isinstance(x, dict) and x.get("mediaType") == OLLAMA_MODEL_LAYER]
    except RecursionError:  # JSON nested deeper than the parser goes: no manifest Ollama writes
        raise MacprofError(f"{manifest}: not an Ollama manifest (JSON nested too deep)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise MacprofError(f"{manifest}: not an Ollama manifest ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not digests or not isinstance(digests[0], str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digests[0]):
        raise MacprofError(f"{manifest}: no model layer ({OLLAMA_MODEL_LAYER}) with a sha256 digest")
    blob = root / "blobs" / digests[0].replace(":", "-")
    if not blob.exists():
        raise MacprofError(f"{manifest}: its model blob {blob} is missing (pull the model again)")
    return blob


def ollama_entries(root: Path) -> list[Entry]:
    base = root / "manifests"
    out = []
    for manifest in sorted(base.glob("*/*/*/*")) if base.is_dir() else []:
        ref = ollama_name(*manifest.relative_to(base).parts)
        try:
            blob = ollama_blob(root, manifest)
        except (MacprofError, OSError) as exc:  # listed with why, in one line: the others still are
            problem = str(exc) if isinstance(exc, MacprofError) else f"{manifest}: cannot read ({exc.strerror})"
            out.append(Entry(ref, "ollama", manifest, "gguf", problem))
            continue
        out.append(Entry(ref, "ollama", blob, "gguf"))
    return out


# -- LM Studio and folders -------------------------------------------------------------------
def lmstudio_entries(root: Path) -> list[Entry]:
    out = []
    for repo in sorted(root.glob("*/*")) if root.is_dir() else []:
        if repo.is_dir():
            out += repo_entries(f"lmstudio:{repo.relative_to(root).as_posix()}", repo, repo_files(repo), "lmstudio")
    return out


class _Walk:
    """One bounded walk: the directories read (by device and inode, so a link back to one is
    not followed again) and the entries left to read (WALK_ENTRIES in all)."""

    def __init__(self, entries: int | None = None) -> None:
        self.seen: set[tuple[int, int]] = set()
        self.left = WALK_ENTRIES if entries is None else entries

    def children(self, folder: Path) -> list[Path]:
        """The folder's entries, sorted; none when it was read before, cannot be read, or the
        walk has read its fill."""
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in self.seen or self.left <= 0:
                return []
            self.seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as it:
                names = [e.name for _, e in zip(range(self.left), it)]
        except OSError:
            return []
        self.left -= len(names)
        return [folder / n for n in sorted(names)]


def repo_files(repo: Path, depth: int = REPO_DEPTH) -> list[str]:
    """The regular files of a repo folder (LM Studio's), relative and "/"-separated, sorted;
    at most ``depth`` levels down and WALK_ENTRIES entries read."""
    walk, out = _Walk(), []

    def visit(folder: Path, rel: str, depth: int) -> None:
        for p in walk.children(folder):
            if p.is_dir():
                if depth > 1:
                    visit(p, f"{rel}{p.name}/", depth - 1)
            elif p.is_file():
                out.append(rel + p.name)

    visit(repo, "", depth)
    return sorted(out)


def folder_entries(folder: Path, depth: int = FOLDER_DEPTH) -> list[Entry]:
    """The GGUF files and MLX directories under a folder, named by their paths: FOLDER_DEPTH
    levels down at most, each directory once, WALK_ENTRIES entries read at most."""
    out: list[Entry] = []
    walk = _Walk()

    def visit(folder: Path, depth: int) -> None:
        if is_mlx_dir(folder):
            out.append(Entry(str(folder), "folder", folder, "mlx"))
            return
        for p in walk.children(folder):
            if p.is_dir():
                if depth > 0 and not p.name.startswith("."):
                    visit(p, depth - 1)
            elif p.name.endswith(".gguf") and is_model_gguf(p.name) and is_gguf(p):
                out.append(Entry(str(p), "folder", p, "gguf"))

    visit(folder, depth)
    return out
