"""Inductor's wrapper code as newer torch releases write it still becomes a starter: the input checks
(assert_size_stride_grouped and any other assert_* helper) are known as checks, and copy_if_misaligned(x) is kept
as what it is, x or an aligned copy of it. With torch 2.14 every region holding a Linear lost its starter to
"assert_size_stride_grouped(...) ... a library call"."""

from __future__ import annotations

import os
import re

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.core.kernel_file import import_file  # noqa: E402
from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.profile.regions import inductor, starter  # noqa: E402
from autokernel.profile.regions.find import find_regions  # noqa: E402
from autokernel.profile.regions.starter_code import StarterError, read  # noqa: E402
from tests.regions import small_models as models  # noqa: E402


def as_newer_inductor_writes_it(code: str) -> str:
    """The wrapper with its input checks grouped and each input passed through copy_if_misaligned, as torch 2.14's
    Inductor writes them (seen in its generated code: `assert_size_stride_grouped((arg0_1, arg1_1), ((129, 4128),
    (4128, )), ((4128, 1), (1, )), 'input')` then `arg0_1 = copy_if_misaligned(arg0_1)`)."""
    checks = re.findall(r"^( +)assert_size_stride\((\w+), (\(.*?\)), (\(.*?\)), 'input'\)\n", code, flags=re.M)
    assert checks, "the generated code checks its inputs"
    indent = checks[0][0]
    names, sizes, strides = (", ".join(check[i] for check in checks) + "," for i in (1, 2, 3))
    grouped = (f"{indent}assert_size_stride_grouped(({names}), ({sizes}), ({strides}), 'input')\n"
               f"{indent}assert_alignment_grouped(({names}), 16, 'input')\n"
               + "".join(f"{indent}{name} = copy_if_misaligned({name})\n" for _, name, _, _ in checks))
    code = re.sub(r"^ +assert_size_stride\(.*\n", "", code, flags=re.M)
    return re.sub(r"^( +buf0 = )", grouped.replace("\\", "\\\\") + r"\1", code, count=1, flags=re.M)


def test_a_starter_is_made_from_the_code_newer_inductor_writes_and_computes_its_region(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    [region] = find_regions(models.TanhGelu(), (models.rows(),)).regions
    store.save(region, tmp_path)
    out = inductor.generate(region.definition, torch.device("cpu"))
    newer = as_newer_inductor_writes_it(out.code)
    assert "assert_size_stride_grouped((arg0_1,)" in newer and "arg0_1 = copy_if_misaligned(arg0_1)" in newer

    path = tmp_path / "starter.py"
    path.write_text(starter.write(region, newer, out.configs, generated_on=out.device, versions=out.versions))
    module = import_file(path, "region_starter_newer_inductor")
    x = models.rows()
    misaligned = torch.empty(x.numel() + 1)[1:].view_as(x).copy_(x)     # 4 bytes past an aligned start
    assert misaligned.data_ptr() % 16 != 0
    expected = models.TanhGelu()(x)
    torch.testing.assert_close(module.kernel_fn(x), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(module.kernel_fn(misaligned), expected, rtol=1e-4, atol=1e-5)


def test_a_library_call_still_has_no_starter():
    code = ("def call(args):\n    arg0_1, = args\n    args.clear()\n    assert_size_stride_grouped((arg0_1,), ((4, 4),), "
            "((4, 1),), 'input')\n    buf0 = empty_strided_cpu((4, 4), (4, 1), torch.float32)\n"
            "    extern_kernels.mm(arg0_1, arg0_1, out=buf0)\n    return (buf0, )\n")
    with pytest.raises(StarterError, match=r"runs `extern_kernels.mm\(arg0_1, arg0_1, out=buf0\)`"):
        read(code)
    checks_only = code.replace("    extern_kernels.mm(arg0_1, arg0_1, out=buf0)\n",
                               "    torch._C._dynamo.guards.assert_size_stride(arg0_1, (4, 4), (4, 1))\n")
    wrapper = read(checks_only)
    assert wrapper.inputs == ["arg0_1"] and len(wrapper.steps) == 1     # the allocation; the checks are gone


def test_inductors_failure_is_named_by_the_error_it_wraps(monkeypatch):
    # After the Quick start the README's test run lost 15 region tests to "Inductor failed: BackendCompilerFailed:
    # backend='inductor' raised:", the wrapper's first line: the cause was on the lines after it.
    import torch._inductor.compile_fx as compile_fx

    def broken(*args, **kwargs):
        raise RuntimeError("the injected lowering failure")
    monkeypatch.setattr(compile_fx, "compile_fx", broken)
    [region] = find_regions(models.TanhGelu(), (models.rows(),)).regions
    with pytest.raises(inductor.InductorFailed, match="raised: RuntimeError: the injected lowering failure"):
        inductor.generate(region.definition, torch.device("cpu"))
