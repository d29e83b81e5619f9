"""Issue 37 (row 16; class 6): `macprof share` removes secret-shaped strings (API keys, bearer
tokens, Authorization values, passwords, user:secret@) and the user's name in any case, from
every string of the log, a model's replies included; and no message macprof prints shows a
URL's credentials (macprof sends none: a URL's are dropped where it is read)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from macprof.store import runlog
from macprof.store.share import redact
from tests.conftest import cli
from tests.test_run import macprof
from tests.test_server_claims import lying_server

# what a reply, a server's error, an engine's message may leak: each must go
SECRETS = {
    "openai": "sk-proj-4eC39HqLyjWDarjtT1zdp7dc9QxZ",
    "live": "sk-live-51HxQ2eZvKYlo2C0aB1cD2eF3gH4",
    "stripe": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "anthropic": "sk-ant-api03-AbC123dEf456GhI789jKl",
    "huggingface": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "github": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "gitlab": "glpat-AbCdEf123456GhIjKlMn",
    "slack": "xoxb-1234567890-abcdefghij",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "google": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}
CONTEXTS = {  # the secret after a word that stays
    "bearer": ("Bearer ", "abc.def123ghi456"),
    "authorization": ("Authorization: Basic ", "dXNlcjpwYXNzMQ=="),
    "api_key": ("api_key=", "zzz999xxq"),
    "password": ("password: ", "hunter22"),
    "x-api-key": ('"x-api-key": "', "Zx81kd02md"),
}
KEPT = ["bearer instruments", "sk-learn-compatible", "Apple M4 Max", "max_tokens", "a basic answer",
        "task-1234567890abcdefghij"]


def _leaky(user: str) -> str:
    return (" ".join(SECRETS.values()) + " " + " ".join(a + b for a, b in CONTEXTS.values()) +
            f" http://bob:hunter2@127.0.0.1:8/v1 ssh bob:pw@10.0.0.1 -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n"
            f"-----END RSA PRIVATE KEY----- said {user.upper()} and {user.title()}, " + ", ".join(KEPT))


def _log(text: str) -> dict:
    attempt = {"task": "t", "attempt": 1, "status": "ok", "text": text, "message": text, "error": text,
               "claims": {"usage.prompt_tokens": text}}
    return {"machine": {"chip": "Apple M4 Max", "host_id": "5bce98f7"},
            "models": [{"identity": {"name": f"m-{SECRETS['huggingface']}", "path": None,
                                     "files": [{"name": f"{SECRETS['openai']}.gguf", "bytes": 1, "sha256": "0" * 64}]},
                        "settings": {"tasks": f"/data/{SECRETS['live']}/t.jsonl"},
                        "engine_versions": {"command": text, text[:40]: "key"},
                        "phases": {"tasks": {"prompt_format": text, "tool_format": SECRETS["aws"], "results": [
                            {"task": "t", "checker": "number", "attempts": [attempt]}]}}}]}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_share_removes_every_secret_shape_and_the_user_name_in_any_case():
    """Every string, whatever its kind (a reply, a checker's message, a free-form key, a file
    name, a vocabulary field), loses each secret; the word before one stays; words that only
    look like one stay; the user's name goes in any case."""
    out, removed = redact(_log(_leaky("maxine")), [("/home/maxine", "<home>"), ("maxine", "<user>"), ("vm", "<host>")])
    strings = list(_strings(out))
    for secret in [*SECRETS.values(), *(b for _, b in CONTEXTS.values()), "hunter2", "bob:pw", "MIIEow"]:
        assert not any(secret in s for s in strings), secret
    reply = out["models"][0]["phases"]["tasks"]["results"][0]["attempts"][0]["text"]
    for word, _ in CONTEXTS.values():
        assert word + "<secret>" in reply, word
    assert "<credentials>@10.0.0.1" in reply and "http://127.0.0.1:8/v1" in reply
    assert "said <user> and <user>," in reply and "MAXINE" not in reply and "Maxine" not in reply
    for word in KEPT:
        assert word in reply, word
    assert out["machine"]["chip"] == "Apple M4 Max"  # vocabulary: no secret there, kept as it is
    assert out["models"][0]["phases"]["tasks"]["tool_format"] == "<secret>"  # a secret goes even from vocabulary
    assert out["models"][0]["identity"]["files"][0]["name"] == "<secret>.gguf"
    assert any("secret-shaped strings" in r for r in removed)
    runlog.RunLog  # noqa: B018 - the shape is a run log's (loaded below in the end-to-end test)


def test_share_removes_the_account_s_full_name(monkeypatch):
    from macprof.store import share

    monkeypatch.setattr(share, "_full_name", lambda user: "Maxine Mustermann")
    monkeypatch.setattr(share.getpass, "getuser", lambda: "mm")
    ids = share._identifiers()
    assert ("Maxine Mustermann", "<user>") in ids
    out, _ = redact({"models": [{"failures": [{"reason": "signed MAXINE MUSTERMANN, Maxine"}]}]}, ids)
    assert out["models"][0]["failures"][0]["reason"] == "signed <user>, Maxine"  # the whole name, not a first name alone


def _chat_server(reply: str):
    return lying_server(lambda body: {"choices": [{"message": {"content": reply}, "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 9, "completion_tokens": 3}})


def test_a_shared_log_keeps_no_secret_a_model_replied(loopback, tmp_path, monkeypatch):
    """End to end: a server's replies leak keys and the user's name in another case; the shared
    copy of the run's log loads, shows, and holds none of them."""
    user = "maxine"
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "leak", "prompt": "say it", "checker": {"type": "number", "answer": 4},
                                 "max_tokens": 8}) + "\n")
    log = tmp_path / "r.json"
    url = loopback(_chat_server(_leaky(user)))
    macprof("run", "--endpoint", f"http://{user}:pw-{SECRETS['aws']}@{url.removeprefix('http://')}/v1", "--api", "chat",
            "--phases", "tasks", "--tasks", str(tasks), "--log", str(log))
    assert SECRETS["live"] in log.read_text() and user.upper() in log.read_text()  # the reply, as recorded
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, user)
    r = cli("share", log, "-o", tmp_path / "s.json")
    assert r.exit_code == 0, r.output
    shared = (tmp_path / "s.json").read_text()
    for secret in [*SECRETS.values(), *(b for _, b in CONTEXTS.values()), user.upper(), user.title()]:
        assert secret not in shared, secret
    assert cli("show", tmp_path / "s.json").exit_code == 0


CREDENTIALS = "alice:s3cr3t-pw"


@pytest.mark.parametrize("args", [
    ["doctor", "--model", f"http://{CREDENTIALS}@127.0.0.1:9/v1"],
    ["run", "--endpoint", f"http://{CREDENTIALS}@127.0.0.1:9/v1"],
    ["run", "--endpoint", f"https://{CREDENTIALS}@127.0.0.1:9/v1"],
    ["run", f"http://{CREDENTIALS}@127.0.0.1:9/v1"],
    ["run", "demo:tiny/q8_0", "--tasks", f"http://{CREDENTIALS}@h/t.jsonl"],
    ["overhead", "--endpoint", f"http://{CREDENTIALS}@127.0.0.1:9/v1"],
])
def test_no_message_shows_a_url_s_credentials(args, tmp_path):
    """`doctor --model URL` printed user:secret on stderr: every message goes through the one
    sanitiser, which drops a URL's credentials (click's own messages too)."""
    proc = subprocess.run([sys.executable, "-m", "macprof", *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode != 0 and "s3cr3t" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "127.0.0.1:9" in proc.stderr or "h/t.jsonl" in proc.stderr, proc.stderr


def test_an_endpoint_s_credentials_are_in_no_log_journal_or_line(loopback, tmp_path):
    """macprof sends no credentials: a URL's are dropped where it is read (config/endpoint.py),
    so the run log, the journal and what the run prints hold none; models.toml's url the same."""
    url = loopback(_chat_server("4")).removeprefix("http://")
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "2+2", "checker": {"type": "number", "answer": 4}, "max_tokens": 8}) + "\n")
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "s"\nengine = "openai"\nurl = "http://{CREDENTIALS}@{url}/v1"\n'
                                          f'model = "m"\napi = "chat"\n')
    for i, how in enumerate((["--endpoint", f"http://{CREDENTIALS}@{url}/v1", "--api", "chat"],
                             ["--config", str(tmp_path / "models.toml")])):
        log = tmp_path / f"r{i}.json"
        proc = macprof("run", *how, "--phases", "tasks", "--tasks", str(tasks), "--log", str(log))
        for text in (log.read_text(), log.with_name(f"r{i}.journal.jsonl").read_text(), proc.stdout, proc.stderr):
            assert "s3cr3t" not in text and "alice" not in text
        assert runlog.load(log).models[0].phases.tasks.summary.within.k == 1
