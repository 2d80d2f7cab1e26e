"""Tests for autokernel/api.py: optimize() on a model in memory (with the loop stubbed out, or refused for real) and the exports."""

import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import autokernel  # noqa: E402
from autokernel import api  # noqa: E402
from autokernel.agents.base import AgentError  # noqa: E402
from autokernel.core import paths  # noqa: E402
from autokernel.core.run_records import RunState  # noqa: E402
from autokernel.routing import plugin  # noqa: E402
from autokernel.search import session  # noqa: E402
from tests.loop_helpers import git, make_project  # noqa: E402
from tests.test_plugin import reference_kernel, write_optimized  # noqa: E402


class TinyClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The workspace and optimized_kernels/ in tmp_path, and a stand-in for the optimization loop.

    The stand-in records what it was asked to do and "optimizes" each job into a reference-backed
    kernel verified at the job's shapes (or into the source the test puts in `sources`).
    """
    monkeypatch.setattr(paths, "WORKSPACE", tmp_path / "workspace")
    monkeypatch.setattr(paths, "OPTIMIZED_DIR", tmp_path / "optimized_kernels")
    runs, sources = [], {}

    def run_optimization(**kwargs):
        jobs = kwargs["plan"](lambda line: None)
        runs.append({**kwargs, "jobs": jobs})
        for job in jobs:
            # A region's job keeps its starter (Inductor's code); a menu type's becomes a reference-backed kernel.
            made = Path(job.path).read_text() + sources.get("region", "") if job.kernel_type.startswith("region_") \
                else reference_kernel(job.kernel_type)
            write_optimized(paths.OPTIMIZED_DIR, {job.kernel_type: job.shapes}, dtypes=(job.dtype,),
                            sources={job.kernel_type: sources.get(job.kernel_type, made)})
        return RunState(tag=kwargs["tag"], jobs=jobs, kept_commit="abc", settings=kwargs["settings"],
                        job_index=len(jobs), done=sources.get("done", True),
                        stopped_because=None if sources.get("done", True) else "the run's time budget is spent")

    monkeypatch.setattr(session, "run_optimization", run_optimization)
    return runs, sources


@pytest.mark.slow
def test_optimize_profiles_extracts_runs_the_loop_checks_and_hands_over_the_fastest_path(project):
    runs, _ = project
    torch.manual_seed(0)
    model, x = TinyClassifier().eval(), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)

    returned = autokernel.optimize(model, x, budget_hours=0.5, top=1, llm_model="m", base_url="http://h/v1")

    (run,) = runs
    # The GEMM with its softmax is one region (issue 25); the menu's matmul or softmax where it is not ranked first.
    [job] = run["jobs"]
    assert job.kernel_type.startswith("region_") or [(job.kernel_type, job.shapes)] in (
        [("matmul", [{"M": 4, "N": 32, "K": 16}])], [("softmax", [{"M": 4, "N": 32}])])
    assert run["tag"].startswith("TinyClassifier-") and run["settings"].agent == "auto"
    assert run["settings"].budget_s == 1800 and run["settings"].quick_bench is True
    assert (run["settings"].llm_model, run["settings"].base_url) == ("m", "http://h/v1")
    assert run["overrides"] == {"budget_s": 1800, "llm_model": "m", "base_url": "http://h/v1"}
    assert run["resume"] is False and run["stay_on_run_branch"] is True
    assert (paths.WORKSPACE / "optimization_plan.json").is_file()
    # Without a GPU nothing is timed for real: the kernels are checked, and PyTorch's own path comes back.
    choice = returned.autokernel_choice
    assert returned is model and plugin.router_of(model) is None
    assert (choice.variant, choice.faster, choice.use_code) == ("eager", False, "model")
    assert choice.summary.startswith("no speed verdict")
    with torch.no_grad():
        assert torch.equal(returned(x), expected)


@pytest.mark.slow
def test_optimize_takes_the_kernels_out_when_the_output_differs(project):
    _, sources = project
    # Both types are wrong: a softmax too quick to register in the CPU profile may not become a job.
    sources["softmax"] = reference_kernel("softmax", body="reference.softmax(*args) * 0")
    sources["matmul"] = reference_kernel("matmul", body="reference.matmul(*args) * 0")
    sources["region"] = "\n_right = kernel_fn\n\n\ndef kernel_fn(*args):\n    return _right(*args) * 0\n"
    model = TinyClassifier().eval().requires_grad_(False)
    inputs = (torch.randn(4, 16),)
    expected = model(*inputs)
    # Each wrong kernel is found alone and dropped, said in a warning: the model comes back on PyTorch's path.
    with pytest.warns(UserWarning, match="the end-to-end check dropped .*over the tolerance"):
        optimized = api.optimize(model, inputs, top=2)
    assert plugin.router_of(model) is None
    assert torch.equal(optimized(*inputs), expected)


@pytest.mark.slow
def test_optimize_warns_when_the_budget_cut_a_kernel_short(project, recwarn):
    _, sources = project
    sources["done"] = False
    api.optimize(TinyClassifier().eval().requires_grad_(False), torch.randn(4, 16), top=1)
    # Torch's own warnings (deprecations; Inductor's "no active CPU backend", given once per process, so to whichever
    # test first makes a region's starter in it) are not the point here.
    torch_folder = str(Path(torch.__file__).parent)
    assert [str(w.message) for w in recwarn
            if not issubclass(w.category, DeprecationWarning) and not w.filename.startswith(torch_folder)] == [
        "not every kernel was optimized (the run's time budget is spent); the ones saved are compared end to end, "
        "and optimize(..., resume=True) goes on"]


@pytest.mark.slow
def test_optimize_warns_when_the_inputs_need_gradients(project):
    # The kernels are inference only: a model meant to be differentiated keeps PyTorch's path.
    with pytest.warns(UserWarning, match="sample inputs need gradients"):
        api.optimize(TinyClassifier().eval(), torch.randn(4, 16, requires_grad=True), top=1)


def test_optimize_checks_the_endpoint_before_writing_anything(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    model = TinyClassifier().eval().requires_grad_(False)
    with pytest.raises(AgentError, match="cannot reach http://127.0.0.1:9/v1"):
        api.optimize(model, torch.randn(4, 16), agent="openai", base_url="http://127.0.0.1:9/v1")
    assert not (root / "workspace" / "optimization_plan.json").exists()
    assert "autokernel/" not in git(root, "branch") and not (root / "workspace" / "state.json").exists()


def test_optimize_rejects_bad_arguments_before_doing_anything(project):
    runs, _ = project
    model = TinyClassifier().eval()
    with pytest.raises(ValueError, match="backend 'cpp' is not supported.*triton.*cuda.*any"):
        api.optimize(model, torch.randn(4, 16), backend="cpp")
    with pytest.raises(ValueError, match="model.eval()"):
        api.optimize(TinyClassifier().train(), torch.randn(4, 16))
    with pytest.raises(ValueError, match="budget_hours"):
        api.optimize(model, torch.randn(4, 16), budget_hours=0)
    with pytest.raises(ValueError, match="unknown run setting"):
        api.optimize(model, torch.randn(4, 16), max_revert=3)
    assert runs == [] and not paths.WORKSPACE.exists()


def test_the_package_exports_the_api():
    assert {"optimize", "plug_in", "unplug"} <= set(dir(autokernel))
    assert autokernel.optimize is api.optimize
    assert autokernel.plug_in is plugin.plug_in and autokernel.unplug is plugin.unplug
    with pytest.raises(AttributeError):
        autokernel.no_such_thing
