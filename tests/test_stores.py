"""Models named by reference (macprof/collect/resolve.py) and the local stores `macprof models`
lists (macprof/collect/stores.py): each store's on-disk layout is built in a temporary folder
around the fake-engine GGUFs and a small MLX directory (the fast tier); the slow tests run the
real llama.cpp engine on the tiny demo model named by a hub id and by its path."""

import hashlib
import importlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from macprof import config
from macprof.collect import resolve, stores
from macprof.errors import MacprofError
from macprof.store import runlog, share
from tests.test_journal import cut_after, one_line
from tests.test_run import FAULT_ARGS, macprof

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ENV_KEYS = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE", "OLLAMA_MODELS", "XDG_CACHE_HOME")


# -- each store's layout ---------------------------------------------------------------------------
def _blob(blobs: Path, src: Path) -> tuple[str, Path]:
    data = src.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / digest).write_bytes(data)
    return digest, blobs / digest


def hub_repo(cache: Path, repo_id: str, files: dict[str, Path], commit: str = COMMIT) -> Path:
    """huggingface_hub's layout: blobs by hash, snapshots/<commit>/ of relative symlinks, refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    for rel, src in files.items():
        _, blob = _blob(repo / "blobs", src)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def ollama_model(root: Path, namespace: str, model: str, tag: str, gguf: Path) -> Path:
    """Ollama's layout: a manifest per name and tag, its layers' blobs as blobs/sha256-<hex>."""
    digest, _ = _blob(root / "blobs", gguf)
    (root / "blobs" / digest).rename(root / "blobs" / f"sha256-{digest}")
    template = hashlib.sha256(b"{{ .Prompt }}").hexdigest()
    (root / "blobs" / f"sha256-{template}").write_bytes(b"{{ .Prompt }}")
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": f"sha256:{template}",
                   "size": 13},
        "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                    "size": gguf.stat().st_size},
                   {"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{template}", "size": 13}]}))
    return root / "blobs" / f"sha256-{digest}"


def mlx_dir(path: Path, hidden: int = 64, vocab: int = 256) -> Path:
    """A small MLX-layout model: config.json and one float16 safetensors file."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": hidden, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "vocab_size": vocab, "max_position_embeddings": 512}))
    header, offset = {}, 0
    for name, shape in (("model.embed_tokens.weight", (vocab, hidden)), ("lm_head.weight", (vocab, hidden))):
        size = shape[0] * shape[1] * 2
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))
    return path


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A home of its own, every store's variable pointing into tmp_path; huggingface_hub's
    constants re-read from it (the library reads its variables once, at import)."""
    import huggingface_hub.constants as hub_constants

    home = tmp_path / "home"
    home.mkdir()
    values = {"HOME": str(home), "HF_HOME": str(tmp_path / "hf"), "OLLAMA_MODELS": str(tmp_path / "ollama"),
              "XDG_CACHE_HOME": str(home / ".cache")}
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    # this machine's own Ollama service store, if it has one, stays out of the tests
    monkeypatch.setattr(stores, "OLLAMA_SERVICE_ROOT", tmp_path / "no-service-install")
    importlib.reload(hub_constants)
    yield values
    monkeypatch.undo()
    importlib.reload(hub_constants)


@pytest.fixture
def built(env, fake_dir, tmp_path):
    """Every store holding models: the layout of each, around fake-a / fake-b and an MLX dir."""
    a, b = fake_dir / "fake-a.gguf", fake_dir / "fake-b.gguf"
    mlx = mlx_dir(tmp_path / "src" / "mlx")
    hub = Path(env["HF_HOME"]) / "hub"
    hub_repo(hub, "org/tiny-GGUF", {"tiny-F16.gguf": a, "tiny-Q4_K_M.gguf": b, "mmproj-tiny-F16.gguf": b})
    hub_repo(hub, "org/two-GGUF", {"two-Q4_K_M.gguf": a, "two-Q4_K_S.gguf": b})
    hub_repo(hub, "mlx-community/tiny-4bit", {"config.json": mlx / "config.json",
                                              "model.safetensors": mlx / "model.safetensors"})
    ollama = Path(env["OLLAMA_MODELS"])
    ollama_model(ollama, "library", "qwen3", "8b", a)
    ollama_model(ollama, "someone", "tiny", "latest", b)
    lms = Path(env["HOME"]) / ".lmstudio" / "models" / "publisher" / "tiny-GGUF"
    lms.mkdir(parents=True)
    (lms / "tiny-Q8_0.gguf").write_bytes(b.read_bytes() + b"\0")  # another file: listed on its own
    flat = Path(env["XDG_CACHE_HOME"]) / "llama.cpp"
    flat.mkdir(parents=True)
    (flat / "org_repo_flat-Q4_0.gguf").write_bytes(a.read_bytes() + b"\0\0")
    return {"a": a, "b": b, "mlx": mlx, "hub": hub, "ollama": ollama, "lms": lms, "flat": flat}


# -- resolution ------------------------------------------------------------------------------------
def test_hub_id_with_a_quantization_picks_that_file(built):
    for ref in ("org/tiny-GGUF:Q4_K_M", "org/tiny-GGUF:q4_k_m", "hf:org/tiny-GGUF:Q4_K_M",
                "org/tiny-GGUF/tiny-Q4_K_M.gguf"):
        r = resolve.resolve(ref)
        assert (r.store, r.format, r.quant) == ("hf", "gguf", "Q4_K_M")
        assert r.path == built["hub"] / "models--org--tiny-GGUF" / "snapshots" / COMMIT / "tiny-Q4_K_M.gguf"
        assert r.path.read_bytes() == built["b"].read_bytes()


def test_hub_mlx_repo_is_its_snapshot_folder(built):
    r = resolve.resolve("mlx-community/tiny-4bit")
    assert (r.format, r.path.name, resolve.ENGINE_OF[r.format]) == ("mlx", COMMIT, "mlx")
    assert (r.path / "config.json").read_bytes() == (built["mlx"] / "config.json").read_bytes()


@pytest.mark.parametrize("ref, words", [
    ("org/two-GGUF:Q4_K", ["ambiguous", "org/two-GGUF:Q4_K_M", "org/two-GGUF:Q4_K_S"]),
    ("org/two-GGUF", ["holds 2 models", "org/two-GGUF:Q4_K_M", "org/two-GGUF:Q4_K_S"]),
    ("org/tiny-GGUF:Q2_K", ["no GGUF of quantization Q2_K", "F16, Q4_K_M"]),
    ("org/absent-GGUF:Q4_K_M", ["not found in the Hugging Face hub cache", "hf download org/absent-GGUF",
                                '--include "*Q4_K_M*"', "LM Studio", "macprof downloads nothing"]),
    ("ollama:qwen3:70b", ["no manifest", "qwen3/70b", "ollama pull qwen3:70b", "OLLAMA_MODELS"]),
    ("ollama:../../etc:x", ["not an Ollama model name"]),
    ("nothing/here/at/all", ["no such file or directory, and not a model reference"]),
    ("models/missing.gguf", ["no such file or directory"]),
])
def test_bad_references_are_one_line(built, ref, words):
    with pytest.raises(MacprofError) as err:
        resolve.resolve(ref)
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_the_hub_cache_is_where_the_library_says(built, tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    moved = tmp_path / "elsewhere"
    hub_repo(moved, "org/moved-GGUF", {"m-Q8_0.gguf": built["a"]})
    monkeypatch.setenv("HF_HUB_CACHE", str(moved))
    importlib.reload(hub_constants)
    assert resolve.resolve("org/moved-GGUF").path.parent.parent.parent.parent == moved
    with pytest.raises(MacprofError, match="not found in the Hugging Face hub cache " + str(moved)):
        resolve.resolve("org/tiny-GGUF:Q4_K_M")


def test_ollama_names_through_the_manifest(built):
    r = resolve.resolve("ollama:qwen3:8b")
    assert (r.store, r.format) == ("ollama", "gguf") and r.path.parent == built["ollama"] / "blobs"
    assert r.path.read_bytes() == built["a"].read_bytes() and r.path.name.startswith("sha256-")
    assert resolve.resolve("ollama:someone/tiny").path.read_bytes() == built["b"].read_bytes()  # tag latest


def test_ollama_linux_service_store_is_searched_when_ollama_models_is_unset(built, env, tmp_path, monkeypatch):
    """Linux's install script runs the server as the user ``ollama`` (home /usr/share/ollama):
    its pulls are found beside the user's own store; OLLAMA_MODELS, when set, is the only store."""
    service = tmp_path / "usr-share-ollama"
    ollama_model(service, "library", "served", "1b", built["a"])
    monkeypatch.setattr(stores, "OLLAMA_SERVICE_ROOT", service)
    assert "served" not in str([e.ref for e in stores.discover()])  # OLLAMA_MODELS set: it alone
    monkeypatch.delenv("OLLAMA_MODELS")
    assert stores.ollama_roots() == [Path(env["HOME"]) / ".ollama" / "models", service]
    assert "ollama:served:1b" in [e.ref for e in stores.discover()]
    assert resolve.resolve("ollama:served:1b").path.parent == service / "blobs"
    assert any(str(service) in where for where in stores.locations())
    with pytest.raises(MacprofError, match="no-such"):  # a miss names both stores
        resolve.resolve("ollama:no-such")
    monkeypatch.setattr(stores, "OLLAMA_SERVICE_ROOT", tmp_path / "absent")  # no service install: the home alone
    assert stores.ollama_roots() == [Path(env["HOME"]) / ".ollama" / "models"]


def test_ollama_manifest_without_a_model_layer(built):
    manifest = built["ollama"] / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.template",
                                                "digest": "sha256:" + "0" * 64}]}))
    with pytest.raises(MacprofError, match="no model layer"):
        resolve.resolve("ollama:broken")


def test_lm_studio_keys_and_its_settings_folder(built, env, tmp_path):
    for ref in ("lmstudio:publisher/tiny-GGUF", "publisher/tiny-GGUF", "publisher/tiny-GGUF/tiny-Q8_0.gguf"):
        r = resolve.resolve(ref)
        assert (r.store, r.path) == ("lmstudio", built["lms"] / "tiny-Q8_0.gguf")
    moved = tmp_path / "lms-elsewhere"
    mlx_dir(moved / "pub" / "tiny-mlx")
    (Path(env["HOME"]) / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": str(moved)}))
    assert resolve.resolve("lmstudio:pub/tiny-mlx").path == moved / "pub" / "tiny-mlx"
    (Path(env["HOME"]) / ".lmstudio" / "settings.json").write_text("{not json")  # ignored: the defaults
    assert resolve.resolve("lmstudio:publisher/tiny-GGUF").store == "lmstudio"


def test_llama_cpp_cache_under_llama_cache(built, env, tmp_path, monkeypatch):
    """LLAMA_CACHE roots llama.cpp's -hf cache (hub layout) and its flat downloads."""
    cache = tmp_path / "llama-cache"
    hub_repo(cache, "org/llama-GGUF", {"l-Q8_0.gguf": built["a"]})
    (cache / "org_llama-GGUF_l-Q4_0.gguf").write_bytes(built["b"].read_bytes())
    monkeypatch.setenv("LLAMA_CACHE", str(cache))
    r = resolve.resolve("org/llama-GGUF")
    assert (r.store, r.quant) == ("llama.cpp", "Q8_0")
    refs = {e.ref: e for e in stores.discover()}
    assert refs["org/llama-GGUF"].store == "llama.cpp"
    assert refs[str(cache / "org_llama-GGUF_l-Q4_0.gguf")].store == "llama.cpp"


def test_paths_and_their_mistakes(built, tmp_path):
    assert resolve.resolve(str(built["a"])).format == "gguf"
    assert resolve.resolve(str(built["mlx"])).format == "mlx"
    (tmp_path / "text.gguf").write_text("not a model")
    with pytest.raises(MacprofError, match="not a GGUF file"):
        resolve.resolve(str(tmp_path / "text.gguf"))
    with pytest.raises(MacprofError, match="not an MLX model"):
        resolve.resolve(str(tmp_path))
    os.mkfifo(tmp_path / "fifo.gguf")
    with pytest.raises(MacprofError, match="FIFO"):
        resolve.resolve(str(tmp_path / "fifo.gguf"))


def test_specs_name_engine_and_source(built):
    settings = config.settings_for(None, {"reps": 2})
    specs = resolve.specs(["org/tiny-GGUF:Q4_K_M", "ollama:qwen3:8b", str(built["a"]), "mlx-community/tiny-4bit"],
                          None, settings, check_engines=False)
    assert [s.name for s in specs] == ["org-tiny-GGUF-Q4_K_M", "ollama-qwen3-8b", "fake-a", "mlx-community-tiny-4bit"]
    assert [s.engine for s in specs] == ["llama.cpp", "llama.cpp", "llama.cpp", "mlx"]
    assert specs[0].source == config.ModelSource("org/tiny-GGUF:Q4_K_M", "hf") and specs[0].settings.reps == 2
    with pytest.raises(MacprofError, match="the same model as ollama:qwen3:8b"):
        resolve.specs(["ollama:qwen3:8b", str(resolve.resolve("ollama:qwen3:8b").path)], None, settings, False)
    with pytest.raises(MacprofError, match="--engine mlx needs an MLX model directory"):
        resolve.specs([str(built["a"])], "mlx", settings, False)


# -- the listing -----------------------------------------------------------------------------------
def test_every_listed_reference_resolves_to_its_model(built, tmp_path):
    folder = tmp_path / "mine"
    mlx_dir(folder / "deep" / "mlx-model", hidden=32)
    entries = stores.discover([folder])
    refs = {e.ref: e for e in entries}
    assert set(refs) == {"org/tiny-GGUF:F16", "org/tiny-GGUF:Q4_K_M", "org/two-GGUF:Q4_K_M", "org/two-GGUF:Q4_K_S",
                         "mlx-community/tiny-4bit", "ollama:qwen3:8b", "ollama:someone/tiny:latest",
                         "lmstudio:publisher/tiny-GGUF", str(built["flat"] / "org_repo_flat-Q4_0.gguf"),
                         str(folder / "deep" / "mlx-model")}
    for ref, e in refs.items():
        r = resolve.resolve(ref)
        assert (r.path, r.format) == (e.path, e.format), ref


def test_models_command_lists_and_writes_a_config(built, env, tmp_path):
    out = macprof("models", "--format", "json", env=env)
    doc = json.loads(out.stdout)
    rows = {r["ref"]: r for r in doc["rows"]}
    row = rows["org/tiny-GGUF:Q4_K_M"]
    assert (row["engine"], row["quant"], row["file_bytes"]) == ("llama.cpp", "F16", built["b"].stat().st_size)
    assert row["n_params"] > 0 and row["fits"] is True
    assert rows["mlx-community/tiny-4bit"]["engine"] == "mlx"
    assert doc["bandwidth"]["measured_gbs"] is None or doc["bandwidth"]["measured_source"].startswith("probe of")
    table = macprof("models", "--select", "*tiny*", env=env).stdout
    assert "org/tiny-GGUF:Q4_K_M" in table and "org/two-GGUF" not in table and "decode ceiling" in table
    assert macprof("models", "--format", "markdown", env=env).stdout.startswith("| reference |")
    toml = tmp_path / "picked.toml"
    macprof("models", "--select", "org/tiny-GGUF:*", "--select", "ollama:*", "--write", str(toml), env=env)
    cfg = config.load(toml, check_engines=False)
    assert {m.name for m in cfg.models} == {"org-tiny-GGUF-F16", "org-tiny-GGUF-Q4_K_M", "ollama-qwen3-8b",
                                            "ollama-someone-tiny-latest"}
    again = macprof("models", "--write", str(toml), env=env, check=False)
    assert again.returncode == 2 and "never overwritten" in one_line(again.stderr)
    macprof("models", "--select", "ollama:qwen3*", "--write", str(toml), "--force-overwrite", env=env)
    assert [m.name for m in config.load(toml, check_engines=False).models] == ["ollama-qwen3-8b"]


@pytest.mark.parametrize("args, words", [
    (["run", "org/two-GGUF:Q4_K", "--engine", "fake"], ["ambiguous"]),
    (["run", "org/absent", "--engine", "fake"], ["hf download org/absent"]),
    (["run", "ollama:nope", "--engine", "fake"], ["ollama pull nope"]),
    (["inspect", "org/absent"], ["not found"]),
    (["run", "--engine", "fake"], ["--engine applies to MODEL arguments"]),
])
def test_the_cli_says_it_in_one_line(built, env, args, words):
    proc = macprof(*args, env=env, check=False)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert all(w in line for w in words), line


# -- runs ------------------------------------------------------------------------------------------
def test_run_a_hub_id_on_the_fake_engine_and_resume_it(built, env, tmp_path):
    log = tmp_path / "hub.json"
    args = ["run", "org/tiny-GGUF:Q4_K_M", "ollama:qwen3:8b", "--engine", "fake", *FAULT_ARGS]
    macprof(*args, "--log", str(log), env=env)
    models = runlog.load(log).models
    assert [m.identity.name for m in models] == ["org-tiny-GGUF-Q4_K_M", "ollama-qwen3-8b"]
    source = models[0].identity.source
    assert (source.ref, source.store) == ("org/tiny-GGUF:Q4_K_M", "hf") and source.path == models[0].identity.path
    assert all(len(m.phases.warm.requests) == 4 for m in models)  # a warm-up and 3 measured
    shared, _ = share.redact(json.loads(log.read_text()), identifiers=[])
    assert [m["identity"]["source"] for m in shared["models"]][0] == {"ref": "org/tiny-GGUF:Q4_K_M", "store": "hf",
                                                                     "path": None}
    # cut after the first model's second request: `--resume` alone finds the models in the journal
    journal = tmp_path / "cut.journal.jsonl"
    journal.write_bytes(cut_after((tmp_path / "hub.journal.jsonl").read_bytes(), 2, torn=False))
    macprof("run", "--resume", str(journal), env=env)
    resumed = runlog.load(tmp_path / "cut.json")
    assert resumed.complete and [len(m.phases.warm.requests) for m in resumed.models] == [4, 4]
    journal.write_bytes(cut_after((tmp_path / "hub.journal.jsonl").read_bytes(), 2, torn=False))
    macprof(*args, "--resume", str(journal), env=env)  # the same command line again: as with a config
    other = macprof("run", "org/tiny-GGUF:F16", "--engine", "fake", *FAULT_ARGS, "--resume",
                    str(tmp_path / "hub.journal.jsonl"), env=env, check=False)
    assert other.returncode == 2 and "finished" in one_line(other.stderr)


@pytest.mark.slow
def test_real_llama_cpp_on_a_hub_id_and_a_path(env, tiny_dir, tmp_path):
    gguf = tiny_dir / "gguf" / "demo-tiny-q4_k_m.gguf"
    hub_repo(Path(env["HF_HOME"]) / "hub", "demo/tiny-GGUF", {"demo-tiny-Q4_K_M.gguf": gguf,
                                                              "demo-tiny-F16.gguf": tiny_dir / "gguf" / "demo-tiny-f16.gguf"})
    tiny = ["--phases", "warm", "--reps", "1", "--gen-tokens", "4", "--prompt-tokens", "16"]
    for ref, name in (("demo/tiny-GGUF:Q4_K_M", "demo-tiny-GGUF-Q4_K_M"), (str(gguf), "demo-tiny-q4_k_m")):
        log = tmp_path / f"{name}.json"
        macprof("run", ref, *tiny, "--log", str(log), env=env)
        (m,) = runlog.load(log).models
        assert (m.identity.name, m.identity.engine, m.identity.source.ref) == (name, "llama.cpp", ref)
        assert m.phases.warm.summary.decode_tok_s.n == 1 and m.phases.warm.summary.decode_tok_s.median > 0


def test_share_removes_a_reference_that_is_a_path():
    log = {"models": [{"identity": {"name": "x", "path": "/home/someone/x.gguf",
                                    "source": {"ref": "~/x.gguf", "store": "path", "path": "/home/someone/x.gguf"}}}]}
    shared, removed = share.redact(log, identifiers=[])
    assert shared["models"][0]["identity"]["source"] == {"ref": "<path of x>", "store": "path", "path": None}
    assert "model path of x" in removed


# -- hostile stores (issue #23, rows 9, 13 and 14) -------------------------------------------------
def test_one_bad_ollama_manifest_is_one_line_and_the_others_are_listed(built, env):
    """A manifest nested 100,000 deep raised RecursionError out of `macprof models`; one broken
    manifest is now its own row, saying why, and every other model is still listed."""
    bad = built["ollama"] / "manifests" / "registry.ollama.ai" / "library" / "nested" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MacprofError, match="not an Ollama manifest .JSON nested too deep."):
        resolve.resolve("ollama:nested")
    entries = {e.ref: e for e in stores.discover()}
    assert entries["ollama:nested:latest"].problem.endswith("not an Ollama manifest (JSON nested too deep)")
    assert "ollama:qwen3:8b" in entries and entries["ollama:qwen3:8b"].problem is None
    out = macprof("models", env=env)
    assert "org/tiny-GGUF:Q4_K_M" in out.stdout and "ollama:someone/tiny:latest" in out.stdout
    assert out.stdout.count("JSON nested too deep") == 1 and out.stderr == ""
    rows = {r["ref"]: r for r in json.loads(macprof("models", "--format", "json", env=env).stdout)["rows"]}
    assert rows["ollama:nested:latest"]["file_bytes"] is None and "nested too deep" in rows["ollama:nested:latest"]["note"]


def _count_reads(monkeypatch) -> list:
    """Every directory listed from now on (os.scandir and os.listdir: Path.iterdir's)."""
    read: list = []
    for name in ("scandir", "listdir"):
        real = getattr(os, name)

        def counted(path=".", _real=real):
            read.append(path)
            return _real(path)
        monkeypatch.setattr(os, name, counted)
    return read


def test_a_folder_linked_to_itself_is_read_once(tmp_path, fake_dir, monkeypatch):
    """Six links to "." made FOLDER_DEPTH levels of 6 ways each: 6^7 directory visits (13 s);
    each directory is read once now, however many links lead to it."""
    folder = tmp_path / "loops"
    folder.mkdir()
    shutil.copy(fake_dir / "fake-b.gguf", folder / "m.gguf")
    for i in range(6):
        (folder / f"link{i}").symlink_to(".")
    read = _count_reads(monkeypatch)
    entries = stores.folder_entries(folder)
    assert [e.path for e in entries] == [folder / "m.gguf"]
    assert len(read) <= 2, len(read)  # the folder, and nothing it links back to


def test_an_lm_studio_entry_linked_to_usr_is_not_walked_whole(env, tmp_path, monkeypatch):
    """A repo folder linked to /usr was walked entry by entry (all of it): the walk of a repo
    stops REPO_DEPTH levels down and after WALK_ENTRIES entries."""
    big = tmp_path / "big"
    for i in range(30):
        (big / f"d{i}" / "a" / "b" / "c" / "e").mkdir(parents=True)
        (big / f"d{i}" / "f.txt").write_text("x")
    lms = Path(env["HOME"]) / ".lmstudio" / "models" / "pub"
    lms.mkdir(parents=True)
    (lms / "usr").symlink_to("/usr")
    (lms / "big").symlink_to(big)
    monkeypatch.setattr(stores, "WALK_ENTRIES", 50)
    read = _count_reads(monkeypatch)
    assert stores.lmstudio_entries(lms.parent) == []
    assert len(read) <= 2 * 50 + 2, len(read)  # at most WALK_ENTRIES entries per repo, each listing >= 1
    assert len(stores.repo_files(big)) < 30  # the walk stopped at its bound
    monkeypatch.setattr(stores, "WALK_ENTRIES", 10_000)
    assert len(stores.repo_files(big)) == 30 and all(f.count("/") == 1 for f in stores.repo_files(big))
    assert not any(f.startswith("d0/a/b/c/e") for f in stores.repo_files(big, depth=2))


def test_a_snapshot_linked_to_a_private_file_names_the_link_never_its_bytes(built, env, tmp_path):
    """A hub snapshot's GGUF linked to /etc/passwd: the message printed the target's first bytes
    (b'root'); it says what the file is instead."""
    private = tmp_path / "private.txt"
    private.write_text("root:x:0:0:secret\n")
    snapshot = hub_repo(built["hub"], "org/linked-GGUF", {"linked-Q4_0.gguf": built["a"]})
    (snapshot / "linked-Q4_0.gguf").unlink()
    (snapshot / "linked-Q4_0.gguf").symlink_to(private)
    proc = macprof("inspect", "org/linked-GGUF", env=env, check=False)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"(a symlink to {private})" in line and "not a GGUF file" in line
    assert "root" not in line.replace(str(tmp_path), "")
