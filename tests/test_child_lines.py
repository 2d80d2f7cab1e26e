"""verify's child marks its own lines; the parent shows those and logs the rest (autokernel/verify/child_lines.py):
torch's warnings and Inductor's autotuning output reach workspace/torch.log, not the user's terminal (issue 38)."""

import io
import subprocess
import sys
import textwrap

from autokernel.verify.child_lines import OWN, OWN_ERROR, OwnLines, Split


def test_every_line_written_through_ownlines_is_marked_blank_and_split_ones_too():
    stream = io.StringIO()
    own = OwnLines(stream)
    own.write("verdict: ")            # a line written in pieces is marked once
    own.write("faster by 1.2x\n\nsecond\nthi")
    own.write("rd\n")
    assert stream.getvalue().split("\n") == [f"{OWN}verdict: faster by 1.2x", OWN, f"{OWN}second", f"{OWN}third", ""]


def test_the_parent_shows_the_childs_own_lines_and_logs_torchs(tmp_path):
    # A child that prints as verify.py's does: its own lines through OwnLines, torch's noise straight to the pipes.
    child = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).resolve().parents[1])!r})
        from autokernel.verify.child_lines import OWN_ERROR, OwnLines
        print("timing PyTorch eager", file=OwnLines(sys.stdout), flush=True)
        sys.stderr.write("AUTOTUNE mm(512x64, 64x176)\\n  triton_mm_4 0.0101 ms 100.0%\\n")
        warnings.warn("TensorFloat32 tensor cores for float32 matrix multiplication available")
        print("verify.py: no kernels", file=OwnLines(sys.stderr, OWN_ERROR), flush=True)
        print("", file=OwnLines(sys.stdout), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    shown, errors = [], []
    split = Split(tmp_path / "ws" / "torch.log", show=shown.append, show_error=errors.append)
    for line in (done.stdout + done.stderr).split("\n")[:-1]:     # by "\n", as runner's TailReader reads them
        split(line)
    split.close()
    assert shown == ["timing PyTorch eager", ""] and errors == ["verify.py: no kernels"]
    logged = (tmp_path / "ws" / "torch.log").read_text()
    assert "AUTOTUNE mm" in logged and "triton_mm_4" in logged and "TensorFloat32" in logged and split.logged == 3
    assert "timing PyTorch eager" not in logged


def test_a_child_that_says_nothing_of_its_own_leaves_no_log(tmp_path):
    split = Split(tmp_path / "torch.log", show=print, show_error=print)
    split(f"{OWN}verdict: no gain")
    split(f"{OWN_ERROR}verify.py: error")
    split.close()
    assert split.logged == 0 and not (tmp_path / "torch.log").exists()
