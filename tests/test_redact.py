"""What a candidate wrote reaches the LLM provider and the run's files without anything that looks like a secret
(autokernel/sandbox/redact.py): unit by unit, and through the real loop, the real judge and the fake LLM server."""

import json
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from autokernel.judge import source_check  # noqa: E402
from autokernel.sandbox import child_env, redact  # noqa: E402
from autokernel.sandbox.redact import REDACTED, scrub  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HONEST = (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text()


@pytest.mark.parametrize("secret", [
    "sk-ant-api03-" + "Ab3dEf6hIj9kLm2nOp5q" * 2, "sk-proj-" + "Zx8Cv7Bn6Mq5Wr4Et3Yu2Io1", "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz",
    "root:$6$Qw9eRt$" + "A1b2C3d4E5f6G7h8I9j0" * 3 + ":19000:0:99999:7:::",
    "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA -----END OPENSSH PRIVATE KEY-----",
    "0123456789abcdef0123456789abcdef01234567", "Q2xhdWRlIGlzIGEgZ29vZCBib3QgYW5kIGEgZ29vZCBmcmllbmQh9X",
])
def test_what_looks_like_a_key_token_or_hash_is_taken_out(secret):
    scrubbed = scrub(f"RuntimeError: leaked {secret} (at kernel.py:3: raise RuntimeError(x))")
    assert REDACTED in scrubbed and "RuntimeError: leaked" in scrubbed and "kernel.py:3" in scrubbed
    assert secret[12:30] not in scrubbed


def test_the_environments_values_the_withheld_ones_and_the_repositorys_env_file_are_taken_out(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_DEPLOY_WORD", "correct horse battery")
    monkeypatch.setattr(child_env, "WITHHELD_VALUES", {"withheld-key-value-1"})
    monkeypatch.setattr(redact, "WITHHELD_VALUES", child_env.WITHHELD_VALUES)
    (tmp_path / ".env").write_text("# a comment\nDATABASE_URL=postgres://u:pw-in-env-file@db/x\nSHORT=ab\n")
    text = ("ValueError: correct horse battery / withheld-key-value-1 / postgres://u:pw-in-env-file@db/x / "
            "api_key = plain-words-here / File /usr/lib/python3/site.py, line 3")
    scrubbed = scrub(text, tmp_path)
    for secret in ("correct horse", "withheld-key", "pw-in-env-file", "plain-words-here"):
        assert secret not in scrubbed, scrubbed
    assert scrubbed.startswith("ValueError: ") and "api_key = " in scrubbed
    assert "File /usr/lib/python3/site.py, line 3" in scrubbed, "paths are no secrets and tracebacks need them"


def test_an_ordinary_error_is_left_as_it_is_and_a_long_one_is_cut():
    message = ("CompilationError: at 12:4: triton_per_fused__log_softmax_0 BLOCK_SIZE_M128_N64_K32 expected "
               "tl.constexpr (at kernel.py:40: y = _rows[grid](x, BLOCK=n)) -- 0x7f3a2b10")
    assert scrub(message) == message
    long = "e" * 50_000
    assert len(scrub(long, limit=1000)) < 1100


@pytest.mark.slow
def test_a_kernel_that_raises_what_it_read_leaks_it_neither_to_the_llm_nor_to_state_json(tmp_path, monkeypatch):
    from autokernel.core.contracts import RunSettings
    from autokernel.core.live import ProgressView
    from autokernel.core.run_records import RunState
    from autokernel.search import gitops, loop
    from autokernel.search.budget import Budget
    from autokernel.search import run_state
    from tests.fake_llm_server import FakeLLMServer
    from tests.loop_helpers import make_job, make_project
    from tests.test_llm_loop import agent_for

    root = make_project(tmp_path / "project", monkeypatch)
    (root / "program.md").write_text((ROOT / "program.md").read_text())
    (root / ".env").write_text("SERVICE_TOKEN=tok-from-the-dotenv-file-42\n")      # git-ignored secrets, as users keep
    monkeypatch.setenv("AUTOKERNEL_DEPLOY_WORD", "the-env-secret-value-7")          # one the sandbox passes on
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")     # it opens a file: the line behind the source check
    leaking = (ROOT / "tests" / "attacks" / "raises_what_it_read.py").read_text()
    saves = []          # every state.json the run wrote: the failure record is in it while the job runs
    real_save = run_state.save
    monkeypatch.setattr(run_state, "save", lambda state, path=None: (real_save(state, path),
                                                                      saves.append(run_state.state_file().read_text())))
    repo = gitops.KernelRepo(root)
    repo.start_branch("leak")
    state = RunState(tag="leak", jobs=[make_job(root, 1, HONEST)], kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=2))
    with FakeLLMServer() as server:
        server.add_kernel_reply("read and raise", leaking)
        server.add_kernel_reply("read and raise again", leaking)
        loop.OptimizationRun(state, repo=repo, agent=agent_for("openai", server), view=ProgressView(interactive=False),
                             budget=Budget(900)).run()
        requests = [json.dumps(request.body) for request in server.requests]
    saved = "".join(saves) + (root / "results.tsv").read_text()
    assert len(requests) == 2 and "The judge's whole error" in requests[1], "the failure was shown to the model"
    assert "RuntimeError: the secrets: " in requests[1] and "RuntimeError: the secrets: " in saved, \
        "the judge's words are kept"
    for secret in ("tok-from-the-dotenv-file-42", "the-env-secret-value-7"):
        assert not any(secret in request for request in requests)
        assert secret not in saved


def test_bench_by_hand_shows_neither_in_its_verdict_nor_in_the_kernels_echoed_output_a_secret(tmp_path):
    # A person, or a coding agent, that runs bench.py reads its output: the kernel's prints and error pass through it.
    import subprocess
    import sys

    kernel = tmp_path / "kernel.py"
    kernel.write_text("import os\nKERNEL_TYPE = 'softmax'\nprint('key', os.environ['MY_SERVICE_KEY'], flush=True)\n"
                      "raise RuntimeError('key ' + os.environ['MY_SERVICE_KEY'])\n")
    out = tmp_path / "result.json"
    env = {**os.environ, "MY_SERVICE_KEY": "svc-key-value-0123", source_check.SOURCE_CHECK_ENV: "0"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(kernel), "--quick", "--json-out",
                           str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert json.loads(out.read_text())["correctness"] == "CRASH"
    assert "kernel| key [redacted]" in proc.stderr and "RuntimeError: key [redacted]" in out.read_text()
    assert "svc-key-value-0123" not in proc.stdout + proc.stderr + out.read_text()
