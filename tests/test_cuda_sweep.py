"""benchmarks/cuda_check.py sweep without a GPU: reading --try and --shape, the variant files it builds, and the
summary of repeated timings (the timing itself needs a GPU: the sweep runs there)."""

import ast

from autokernel.core.paths import ROOT
from benchmarks.suites import cuda_sweep


def test_a_try_takes_numbers_and_booleans():
    assert cuda_sweep.parse_try("PACKED_ROW=1,LOCAL_MAX=True, BLOCK_THREADS=256") == {
        "PACKED_ROW": 1, "LOCAL_MAX": True, "BLOCK_THREADS": 256}
    assert cuda_sweep.parse_try("LOCAL_MAX=false") == {"LOCAL_MAX": False}


def test_a_shape_is_a_timed_row():
    assert cuda_sweep.parse_shape("M=256,N=32768") == {"M": 256, "N": 32768}


def test_repeated_timings_give_their_median_and_range():
    assert cuda_sweep.summary([0.9, 0.8, 0.85]) == "0.85 (0.80-0.90)"
    assert cuda_sweep.summary([0.8, 0.9]) == "0.85 (0.80-0.90)"
    assert cuda_sweep.summary([0.91]) == "0.91"


def test_a_variant_updates_the_tunables_before_the_build_reads_them():
    source = (ROOT / "kernels" / "cuda" / "softmax.py").read_text()
    variant = cuda_sweep.variant_source(source, {"PACKED_ROW": True, "MAX_PACKS": 16})
    body = ast.parse(variant).body
    assign = next(i for i, node in enumerate(body) if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "TUNABLES" for t in node.targets))
    update = body[assign + 1]
    assert ast.unparse(update) == "TUNABLES.update({'PACKED_ROW': True, 'MAX_PACKS': 16})"
    tunables = ast.literal_eval(body[assign].value)
    exec(ast.unparse(update), {}, {"TUNABLES": tunables})          # noqa: S102 (the line the sweep wrote)
    assert tunables["PACKED_ROW"] is True and tunables["MAX_PACKS"] == 16 and tunables["BLOCK_THREADS"] == 512
    load_line = next(i for i, node in enumerate(body) if "load_cuda(" in ast.unparse(node) and i > assign)
    assert load_line > assign + 1
