import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Tests never reach a model hub, and share one build of the tiny demo models.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures"

# The suite starts hundreds of Python processes (`macprof run`, its workers, `show`...) that import
# macprof, and pytest rewrites every test module's asserts. Where PYTHONDONTWRITEBYTECODE is set
# (some CI images and sandboxes set it), each of them would compile all of that from source again:
# 5-6 s more in every pytest process, about 60 ms in every other. The tests keep the bytecode
# instead, in a folder of their own outside the checkout (PYTHONPYCACHEPREFIX), so the tree stays
# as clean as that setting meant it to; this process and the ones it starts (xdist's included).
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), f"macprof-pycache-{os.getuid()}"))
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    sys.dont_write_bytecode = False

# The fuzzers (test_fuzz.py) try 150 examples each in the whole suite; the fast tier
# (-m "not slow") tries 20, since every run-log example is a schema validation of ~0.1 s.
settings.register_profile("full", max_examples=150)
settings.register_profile("fast", max_examples=20)


FAST_TIER_WORKERS = 4  # at most; fewer on a machine with fewer cores


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The fast tier (-m "not slow") runs one pytest-xdist worker per core, up to
    FAST_TIER_WORKERS (the test extra installs xdist). Not more: its tests spend their time in the
    Python processes they start (`macprof run`, its workers), so more workers than cores only
    competed for them (4 workers on 2 cores took 20-30 % longer). The whole suite stays serial
    (two real engines side by side would compete for the same cores), and an explicit -n, or
    -p no:xdist, wins."""
    if not _fast_tier(config) or os.environ.get("PYTEST_XDIST_WORKER") or not config.pluginmanager.hasplugin("xdist"):
        return
    if config.option.numprocesses is None and not config.getoption("usepdb", False):  # -n 0 is asked for too
        config.option.numprocesses = max(1, min(FAST_TIER_WORKERS, os.cpu_count() or 1))
        if config.option.dist == "no":  # tests one by one, those sharing a module-scoped run together
            config.option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup``, the tests that share a module- or class-scoped fixture (a whole
    `macprof run` made once for them) go to one worker, so that run is made once; every other
    test goes wherever a worker is free. Whole modules on one worker (loadscope) left the longest
    module's 20 s running alone at the end."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        shared = sorted(name for name, defs in getattr(item, "_fixtureinfo").name2fixturedefs.items()
                        if defs and defs[-1].scope in ("module", "class"))
        if shared and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{','.join(shared)}"))


def _fast_tier(config) -> bool:
    return (config.getoption("markexpr", "") or "").replace(" ", "") == "notslow"


def pytest_configure(config):
    if config.getoption("hypothesis_profile", None) is None:  # an explicit --hypothesis-profile wins
        settings.load_profile("fast" if _fast_tier(config) else "full")


def cli(*args):
    """A macprof command run in this process by click's CliRunner -> its Result (exit_code,
    output). For tests of what a command prints or writes: it costs no interpreter start-up and
    shares this process's imports (matplotlib's 1 s, for one). A test of the process itself
    (signals, a closed pipe, the exit status the shell sees) starts one instead."""
    from click.testing import CliRunner

    from macprof.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def recomputed(data: dict) -> dict:
    """A hand-edited run log (its JSON) with every figure recomputed from its raw records, as a
    run that recorded those would have written it (analyse/unbuild.py: build itself), so that a
    made-up log verifies and `show` and `compare` warn of nothing about it."""
    import json

    from macprof.analyse.unbuild import rebuilt
    from macprof.store import runlog

    log = runlog.parse("a test's log", json.dumps(data))
    return {**data, "models": rebuilt(log).to_json()["models"]}


@pytest.fixture(scope="session")
def cache_root(request, tmp_path_factory) -> Path:
    """A private macprof cache (sha256 cache, demo models) for the whole session."""
    root = tmp_path_factory.mktemp("macprof-cache")
    os.environ["MACPROF_CACHE"] = str(root)
    if _fast_tier(request.config):
        _probe_small()
    return root


def _probe_small() -> None:
    """The fast tier's bandwidth and matmul probes, measured for real but small, into the cache a
    run reads them from: without it, the first `macprof run` of each xdist worker measured them
    at full size (4-5 s of CPU each), for fake-engine runs whose ceilings no test compares with
    the hardware. The whole suite measures them at full size, once: the real engines' ceilings
    are checked against the bandwidth estimate (tests/test_run.py, test_sweeps.py), which small
    probes (a cache-sized buffer, a 64x64 matmul) would make compute-bound or cache-inflated.
    tests/test_bandwidth.py tests the probes themselves."""
    from macprof.collect import probes

    result = probes.measure(sizes_mib=[16], reps=2)
    result["flops"] = probes.measure_flops(device=result.get("device"), n=64, reps=2)
    probes.store(result)


@pytest.fixture
def tiny_dir(request, tiny_build) -> Path:
    """The tiny demo models: for the real engines, so only for tests marked slow."""
    if request.node.get_closest_marker("slow") is None:
        pytest.fail("the demo models run the real engines: mark the test @pytest.mark.slow, or use fake_dir")
    return tiny_build


@pytest.fixture(scope="session")
def tiny_build(cache_root) -> Path:
    """The build itself, shared; a module-scoped fixture reaches it only through a slow param."""
    from macprof.demo.build import build

    return build("tiny", cache_root / "demo")


# The fast tier's models: fake-engine GGUFs (macprof/engines/fake.py), fake-a the larger.
FAKE_MODELS = {"fake-a": {"hidden": 64}, "fake-b": {"hidden": 32}}


@pytest.fixture(scope="session")
def fake_dir(cache_root) -> Path:
    """Two fake-engine models and their models.toml, written in well under a second."""
    from macprof.engines.fake import write_model

    root = cache_root / "fake"
    root.mkdir()
    toml = []
    for name, shape in FAKE_MODELS.items():
        write_model(root / f"{name}.gguf", **shape)
        toml.append(f'[[models]]\nname = "{name}"\nengine = "fake"\npath = "{name}.gguf"\n')
    (root / "models.toml").write_text("\n".join(toml))
    return root


GGUF_VARIANTS = [("f16", "gguf/demo-tiny-f16.gguf"), ("q8_0", "gguf/demo-tiny-q8_0.gguf"),
                 ("q4_k_m", "gguf/demo-tiny-q4_k_m.gguf")]
MLX_VARIANTS = [("mlx-f16", "mlx/demo-tiny-f16"), ("mlx-8bit", "mlx/demo-tiny-8bit"),
                ("mlx-4bit", "mlx/demo-tiny-4bit")]
ALL_VARIANTS = [("llama.cpp", *v) for v in GGUF_VARIANTS] + [("mlx", *v) for v in MLX_VARIANTS]


@pytest.fixture
def loopback():
    """Starts an HTTP server on 127.0.0.1 (a free port) with the handler class given, in a
    thread: -> its base URL. Every server a test started is shut down after it."""
    import threading
    from http.server import ThreadingHTTPServer

    servers = []

    def start(handler) -> str:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def chat_completions_server(reply_of):
    """A chat-completions server's handler class: each POST to /v1/chat/completions answered with
    the body ``reply_of(the request's body)`` gives, raw (a well-formed completion or not, the
    claims a lying server makes); GET lists one model; any other path is a 404."""
    import json
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, obj):
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"data": [{"id": "m"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                self.send_response(404)
                self.end_headers()
                return
            self._send(reply_of(body))

    return Handler
