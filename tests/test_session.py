"""Tests for autokernel/search/session.py: the checks before anything is written, resume, and the user's branch.

The runs go through session.run_optimization in this process, on a throwaway repository with the
fake judge and scripted agents of tests/loop_helpers.py. The kill test forks: the child runs the
loop and dies (os._exit, no cleanup at all, as under kill -9) at one write step; the parent resumes.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autokernel.agents import builtin
from autokernel.agents.base import AgentError, MalformedReply, OutOfTime, SearchExhausted
from autokernel.core.contracts import RunSettings
from autokernel.core.interrupts import Interrupted
from autokernel.core.run_records import RunState
from autokernel.core.errors import OptimizationError
from autokernel.core.live import ProgressView
from autokernel.core.lock import RunLocked
from autokernel.search import budget, gitops, loop, results, run_state, session
from autokernel.search.loop_records import budget_too_short, is_run_stop
from tests.loop_helpers import TableAgent, fake_run_bench, git, make_job, make_project, proposal, result, source

PROJECT = Path(__file__).resolve().parents[1]
EVERY_WRITE_STEP = {"baseline: in flight", "baseline: committed", "experiment: in flight", "experiment: kernel written",
                    "experiment: committed", "verdict saved", "reverted", "row written", "row settled",
                    "finish: in flight", "finish: files written", "finish: committed", "finish: saved"}


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    return root


def _table() -> list:
    return [proposal("faster", source(result(60.0)), tokens_in=10, cost_usd=0.01),
            proposal("wrong", source(result(1.0, "FAIL")), tokens_in=10, cost_usd=0.01),
            MalformedReply("no code", tokens_in=5),
            proposal("faster still", source(result(40.0)), tokens_in=10, cost_usd=0.01)]


def _use_agent(monkeypatch, agent) -> None:
    monkeypatch.setattr(session, "make_agent", lambda *args, **kwargs: agent)


def _start(project: Path, monkeypatch, *, jobs=None, with_agent=None, checkpoint=None, resume=False, overrides=None,
           **settings) -> RunState:
    _use_agent(monkeypatch, with_agent or TableAgent(_table()))
    jobs = jobs if jobs is not None else [make_job(project, 1, source(result(100.0))),
                                          make_job(project, 2, source(result(None, "FAIL")))]
    return session.run_optimization(plan=lambda log: jobs, settings=RunSettings(**settings), overrides=overrides,
                                    tag="night", resume=resume, view=ProgressView(interactive=False),
                                    checkpoint=checkpoint)


def _rows(project: Path) -> list[tuple]:
    return [(r["experiment"], r["status"], r["correctness"], r["description"])
            for r in results.read_rows(project / "results.tsv")]


def _branch_subjects(project: Path) -> list[str]:
    return git(project, "log", "--format=%s", gitops.branch_name("night")).splitlines()


# ---------------------------------------------------------------------- kill at every write
def _manifest(project: Path) -> dict:
    """The manifest on the run's branch (the user is back on main, where optimized_kernels/ is not)."""
    return json.loads(git(project, "show", f"{gitops.branch_name('night')}:optimized_kernels/manifest.json"))["kernels"]


def _checkpoints(project: Path, monkeypatch) -> list[str]:
    seen = []
    _start(project, monkeypatch, checkpoint=seen.append, target_speedup=100, max_consecutive_reverts=3)
    return seen


@pytest.mark.slow
def test_a_kill_at_any_write_step_loses_nothing_and_numbers_nothing_twice(tmp_path, monkeypatch):
    reference = make_project(tmp_path / "reference", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    steps = _checkpoints(reference, monkeypatch)
    expected_rows, expected_subjects = _rows(reference), _branch_subjects(reference)
    expected_manifest = _manifest(reference)
    assert set(steps) == EVERY_WRITE_STEP, steps
    assert [status for _, status, _, _ in expected_rows] == ["baseline", "keep", "revert", "revert", "keep",
                                                            "baseline"]

    for index, step in enumerate(steps):
        project = make_project(tmp_path / f"kill{index}", monkeypatch)
        pid = os.fork()
        if pid == 0:                     # the child: the loop, killed dead at this step
            calls = iter(range(len(steps)))

            def die_here(name):
                if next(calls) == index:
                    os._exit(137)
            try:
                _start(project, monkeypatch, checkpoint=die_here, target_speedup=100, max_consecutive_reverts=3)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        state = _start(project, monkeypatch, resume=True) if run_state.load().done is False else run_state.load()
        label = f"killed after '{step}' (write {index + 1} of {len(steps)})"
        assert state.done, label
        assert _rows(project) == expected_rows, label
        assert _branch_subjects(project) == expected_subjects, label
        manifest = _manifest(project)
        assert {k: {f: v for f, v in e.items() if f != "source_commit"} for k, e in manifest.items()} == \
               {k: {f: v for f, v in e.items() if f != "source_commit"} for k, e in expected_manifest.items()}, label
        assert git(project, "status", "--porcelain") == "", label
        assert git(project, "branch", "--show-current").strip() == "main", label


def test_a_kill_loses_at_most_a_clock_tick_of_the_budget(project, monkeypatch):
    # The state is saved at each decision; between them only the clock file keeps the time used (issue 24: five
    # kills charged 52 s of 65). The child is killed dead one second into its first experiment.
    monkeypatch.setattr(budget, "CLOCK_SAVE_S", 0.1)
    pid = os.fork()
    if pid == 0:
        def die_in_the_first_experiment(name):
            if name == "experiment: in flight":
                time.sleep(1.0)
                os._exit(137)
        try:
            _start(project, monkeypatch, checkpoint=die_in_the_first_experiment)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    saved = run_state.load()
    clock = json.loads((project / "workspace" / budget.CLOCK_FILE_NAME).read_text())
    assert clock["tag"] == "night" and clock["elapsed_s"] >= saved.elapsed_s + 0.8
    state = _start(project, monkeypatch, resume=True)
    assert state.done and state.elapsed_s >= clock["elapsed_s"]


def test_the_run_holds_no_key_in_its_environment_and_gives_them_back(project, monkeypatch):
    # The agent reads its key when it is made; from then on no child of the run can inherit one (issue 24).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("HF_TOKEN", "hf-test")
    seen = []
    _start(project, monkeypatch, checkpoint=lambda name: seen.append(
        {key: os.environ.get(key) for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN")}))
    assert seen and all(set(env.values()) == {None} for env in seen), seen
    assert (os.environ["OPENAI_API_KEY"], os.environ["ANTHROPIC_API_KEY"], os.environ["HF_TOKEN"]) == \
           ("sk-test", "sk-ant-test", "hf-test")


# ---------------------------------------------------------------------- checks before anything is written
def _nothing_created(project: Path) -> bool:
    return (not (project / "workspace" / "state.json").exists() and "autokernel/night" not in git(project, "branch")
            and git(project, "branch", "--show-current").strip() == "main")


def test_a_foreign_results_file_is_refused_before_anything_is_created(project, monkeypatch):
    (project / "results.tsv").write_text("experiment\ttag\tsomething else\n1\tx\ty\n")
    with pytest.raises(results.ResultsFileError, match="move it aside"):
        _start(project, monkeypatch)
    assert _nothing_created(project)


def test_untracked_files_in_optimized_kernels_are_refused(project, monkeypatch):
    (project / "optimized_kernels").mkdir()
    (project / "optimized_kernels" / "mine.py").write_text("# the user's\n")
    with pytest.raises(OptimizationError, match=r"optimized_kernels/ has files git does not track \(optimized_kernels/mine.py\)"):
        _start(project, monkeypatch)
    assert _nothing_created(project)
    assert (project / "optimized_kernels" / "mine.py").read_text() == "# the user's\n"


def test_an_existing_branch_is_refused_before_profiling(project, monkeypatch):
    git(project, "branch", gitops.branch_name("night"))
    planned = []
    _use_agent(monkeypatch, TableAgent([]))
    with pytest.raises(gitops.GitOpsError, match="already exists"):
        session.run_optimization(plan=lambda log: planned.append(1) or [], settings=RunSettings(), tag="night",
                                 view=ProgressView(interactive=False))
    assert planned == [] and not (project / "workspace" / "state.json").exists()


def test_a_sandbox_that_hides_the_gpu_stops_the_run_before_profiling(project, monkeypatch):
    # On an H100 the sandbox once hid the GPU: every bench ran in Triton's interpreter, none failed.
    planned = []
    _use_agent(monkeypatch, TableAgent([]))
    monkeypatch.setattr(session.sandbox_checks, "sandbox_gpu_problem", lambda cwd: "a process in the candidates' sandbox "
                                                                           "cannot use it")
    with pytest.raises(OptimizationError, match="cannot use it"):
        session.run_optimization(plan=lambda log: planned.append(1) or [], settings=RunSettings(), tag="night",
                                 view=ProgressView(interactive=False))
    assert planned == [] and _nothing_created(project)


def test_a_second_run_in_the_same_repository_is_refused_naming_the_holder(project, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(PROJECT)!r})
        from pathlib import Path
        from autokernel.core.lock import RunLock
        lock = RunLock(Path({str(project / "workspace" / "run.lock")!r})).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLocked, match=f"another autokernel run \\(PID {holder.pid}\\)"):
            _start(project, monkeypatch)
        assert _nothing_created(project)
    finally:
        holder.kill()
        holder.wait()
    assert _start(project, monkeypatch).done, "a dead holder's lock is free at once"


def test_a_run_ended_by_an_agent_error_does_not_claim_optimized_kernels(project, monkeypatch, capsys):
    with pytest.raises(AgentError):
        _start(project, monkeypatch, with_agent=TableAgent([AgentError("the API refused the request (HTTP 400)")]))
    out = capsys.readouterr().out
    assert "no optimized kernel was saved, so optimized_kernels/ holds none of this run's" in out
    assert "the optimized kernels in optimized_kernels/" not in out and "kernels saved" not in out
    assert "optimized_kernels/manifest.json" not in git(project, "ls-tree", "-r", "--name-only",
                                                        gitops.branch_name("night"))


def test_a_work_folder_that_is_no_repository_is_refused_leaving_no_lock(tmp_path, monkeypatch):
    plain = tmp_path / "not_a_repository"
    plain.mkdir()
    for name, value in {"ROOT": plain, "WORKSPACE": plain / "workspace", "RESULTS_TSV": plain / "results.tsv"}.items():
        monkeypatch.setattr(session.paths, name, value)
    _use_agent(monkeypatch, TableAgent([]))
    with pytest.raises(gitops.GitOpsError, match="is not a git repository"):
        session.run_optimization(plan=lambda log: [], settings=RunSettings(), tag="night",
                                 view=ProgressView(interactive=False))
    assert list(plain.iterdir()) == [], "no workspace/run.lock (or anything) is left behind"


def test_an_unfinished_run_is_set_aside_by_new_keeping_its_branch_and_rows(project, monkeypatch, capsys):
    first = _start(project, monkeypatch, with_agent=TableAgent([OutOfTime("stop")]))
    assert not first.done and run_state.resumable() is not None
    rows = _rows(project)
    jobs = [make_job(project, 1, source(result(100.0)))]
    _use_agent(monkeypatch, TableAgent([]))
    with pytest.raises(OptimizationError, match=r"holds run 'night', unfinished: pass --resume to continue it, or "
                                                r"--new to start a new run \(its branch autokernel/night"):
        session.run_optimization(plan=lambda log: jobs, settings=RunSettings(), tag="morning",
                                 view=ProgressView(interactive=False))
    assert "autokernel/morning" not in git(project, "branch") and run_state.load().tag == "night"

    capsys.readouterr()
    second = session.run_optimization(plan=lambda log: jobs, settings=RunSettings(), tag="morning", new=True,
                                      view=ProgressView(interactive=False))
    assert second.tag == "morning" and run_state.load().tag == "morning"
    aside = project / "workspace" / "state.night.json"
    assert run_state.load(aside) == run_state.load(aside) and not run_state.load(aside).done
    assert "autokernel/night" in git(project, "branch"), "the old run's branch stays"
    assert _rows(project)[:len(rows)] == rows and _rows(project)[len(rows)][0] == rows[-1][0] + 1
    assert f"its state is now {aside}" in capsys.readouterr().out


# ---------------------------------------------------------------------- resume
def test_resume_restores_every_setting_and_a_flag_overrides_out_loud(project, monkeypatch, capsys):
    settings = dict(budget_s=180.0, max_consecutive_reverts=100, target_speedup=1000.0, agent="scripted",
                    llm_model="fake-model", base_url="http://127.0.0.1:9/v1", max_cost_usd=5.0, reasoning="medium")
    table = [proposal("faster", source(result(60.0)), tokens_in=10, cost_usd=0.01), OutOfTime("stop here")]
    state = _start(project, monkeypatch, with_agent=TableAgent(table), **settings)
    assert state.stopped_because == budget_too_short("stop here") and is_run_stop(state.stopped_because)
    saved = run_state.load().settings
    assert (saved.budget_s, saved.max_consecutive_reverts, saved.target_speedup, saved.base_url, saved.max_cost_usd,
            saved.llm_model) == (180.0, 100, 1000.0, "http://127.0.0.1:9/v1", 5.0, "fake-model")

    made = []

    def make_agent(kind, *, model=None, base_url=None, reasoning=None):
        made.append((kind, model, base_url, reasoning))
        return TableAgent(_table()[:1] + [SearchExhausted("done")])

    monkeypatch.setattr(session, "make_agent", make_agent)
    capsys.readouterr()
    state = session.run_optimization(resume=True, overrides={"budget_s": 600.0}, view=ProgressView(interactive=False))
    out = capsys.readouterr().out
    assert made == [("scripted", "fake-model", "http://127.0.0.1:9/v1", "medium")], \
        "resume used the run's agent settings, its reasoning level included"
    assert state.settings.max_consecutive_reverts == 100 and state.settings.target_speedup == 1000.0
    assert state.settings.budget_s == 600.0
    assert "--budget 10m00s overrides the run's 3m00s" in out
    assert "agent scripted fake-model at http://127.0.0.1:9/v1" in out and "--reasoning medium" in out


def test_resume_with_the_builtin_agent_drops_the_llm_agents_model_and_url_out_loud(project, monkeypatch, capsys):
    from autokernel.agents import factory

    _start(project, monkeypatch, with_agent=TableAgent([OutOfTime("stop")]), agent="openai",
           llm_model="qwen2.5-coder", base_url="http://127.0.0.1:9/v1")
    monkeypatch.setattr(session, "make_agent", factory.make_agent)      # the real one: it refuses a stray URL
    monkeypatch.setattr(builtin.BuiltinAgent, "propose", lambda self, ctx: (_ for _ in ()).throw(
        SearchExhausted("enough")))
    capsys.readouterr()
    state = session.run_optimization(resume=True, overrides={"agent": "builtin"}, view=ProgressView(interactive=False))
    out = capsys.readouterr().out
    assert (state.settings.agent, state.settings.llm_model, state.settings.base_url) == ("builtin", None, None)
    assert "--llm-model qwen2.5-coder was the run's scripted agent's: dropped for --agent builtin" in out
    assert "--base-url http://127.0.0.1:9/v1 was the run's scripted agent's: dropped for --agent builtin" in out


def test_resume_refuses_to_drop_a_users_commit_on_the_run_branch(project, monkeypatch):
    _start(project, monkeypatch, with_agent=TableAgent([OutOfTime("stop")]))
    git(project, "checkout", "-q", gitops.branch_name("night"))
    (project / "notes.md").write_text("my analysis\n")
    git(project, "add", "notes.md")
    git(project, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-q", "-m", "my notes")
    mine = git(project, "rev-parse", "HEAD").strip()
    git(project, "checkout", "-q", "main")
    with pytest.raises(OptimizationError, match=r"1 commit\(s\) after the run's last kept one that AutoKernel did not "
                                                r"make \(\w+ my notes\)"):
        _start(project, monkeypatch, resume=True)
    assert git(project, "rev-parse", gitops.branch_name("night")).strip() == mine


def test_the_user_is_returned_to_their_branch_or_detached_commit(project, monkeypatch, capsys):
    git(project, "checkout", "-q", "-b", "feature")
    _start(project, monkeypatch)
    assert git(project, "branch", "--show-current").strip() == "feature"
    assert "git checkout autokernel/night" in capsys.readouterr().out
    git(project, "checkout", "-q", "--detach", "main")
    detached = git(project, "rev-parse", "HEAD").strip()
    monkeypatch.setattr(session, "default_tag", lambda name: "second")
    _use_agent(monkeypatch, TableAgent([]))
    session.run_optimization(plan=lambda log: [make_job(project, 1, source(result(100.0)))], settings=RunSettings(),
                             view=ProgressView(interactive=False))
    assert git(project, "branch", "--show-current").strip() == "" and git(project, "rev-parse", "HEAD").strip() == detached


def test_an_interrupt_returns_the_user_and_resume_goes_on(project, monkeypatch):
    class Interrupting(TableAgent):
        def propose(self, ctx):
            if len(ctx.history) == 1:
                raise Interrupted(2)
            return super().propose(ctx)

    with pytest.raises(KeyboardInterrupt):
        _start(project, monkeypatch, with_agent=Interrupting(_table()))
    assert git(project, "branch", "--show-current").strip() == "main"
    assert run_state.load().stopped_because == "interrupted (SIGINT)"
    state = _start(project, monkeypatch, resume=True)
    assert state.done and [r[0] for r in _rows(project)] == list(range(1, 7))


def test_a_resumed_built_in_search_goes_on_where_it_stopped(tmp_path, monkeypatch):
    from autokernel.agents.builtin import BuiltinAgent

    starter = source(result(100.0)) + 'TUNABLES = {"A": 3, "B": 3}\nTUNABLE_CHOICES = {"A": [1, 2, 3, 4, 5], "B": [1, 2, 3, 4, 5]}\n'

    def descriptions(root):
        return [row[3] for row in _rows(root)[1:]]

    reference = make_project(tmp_path / "reference", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    _start(reference, monkeypatch, jobs=[make_job(reference, 1, starter)], with_agent=BuiltinAgent(),
           max_consecutive_reverts=100)
    uninterrupted = descriptions(reference)
    assert len(uninterrupted) == 4 and len(set(uninterrupted)) == 4

    project = make_project(tmp_path / "project", monkeypatch)
    rows_settled = []

    def stop_after_two(name):
        if name == "row settled":
            rows_settled.append(name)
            if len(rows_settled) == 3:          # the baseline and two experiments
                raise Interrupted(15)
    with pytest.raises(KeyboardInterrupt):
        _start(project, monkeypatch, jobs=[make_job(project, 1, starter)], with_agent=BuiltinAgent(),
               checkpoint=stop_after_two, max_consecutive_reverts=100)
    assert len(descriptions(project)) == 2
    _start(project, monkeypatch, with_agent=BuiltinAgent(), resume=True)
    assert descriptions(project) == uninterrupted, "the resumed search repeated or skipped a configuration"


def test_a_cost_cap_on_a_model_without_prices_is_refused_up_front(project, monkeypatch):
    from tests.fake_llm_server import FakeLLMServer

    planned = []
    with FakeLLMServer() as server:
        with pytest.raises(AgentError, match="--max-cost needs a model whose prices AutoKernel knows"):
            session.run_optimization(plan=lambda log: planned.append(1) or [], tag="night",
                                     settings=RunSettings(agent="openai", llm_model="local-llama",
                                                          base_url=server.openai_base_url, max_cost_usd=5.0),
                                     view=ProgressView(interactive=False))
        assert server.checks == [] and planned == []
    assert "autokernel/night" not in git(project, "branch")

