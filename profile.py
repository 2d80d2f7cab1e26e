"""Command line for the profiler: where a model's time goes, ranked by Amdahl's law, into workspace/.

    python profile.py MODEL [--class-name NAME] [--input-shape 1,512] [--dtype float16]
                      [--model-arg NAME=VALUE ...] [--device cuda] [--top N] [--out DIR]
    python profile.py --hf llama [--input-shape 1,512] [--dtype float16] ...

Writes workspace/profile_report.json (every op, its time, shapes and kernel type) and
workspace/optimization_plan.json (kernel types ranked by end-to-end impact), then prints the
plan. This file is the door in the layout: the command is autokernel/profile/profile_command.py, which
`autokernel profile` starts as `python -m autokernel.profile.profile_command`; the profiler is
autokernel/profile/profiler.py, and extract.py turns the plan into kernel jobs.

A note on this file's name: it is also the name of the standard library's `profile` module,
which cProfile imports, and torch.compile imports cProfile. With the project root first on
sys.path (running any script here, or pytest), `import profile` finds this file instead.
"""

import sys
from pathlib import Path

if __name__ == "profile":
    # Imported as the module `profile` (by cProfile, hence torch.compile), not run as a script:
    # load the real standard-library module from its own directory and put it in sys.modules in
    # our place. The import system hands back whatever sys.modules holds when this file finishes,
    # so every importer gets the standard library's profile, and nothing below here is used.
    import importlib.util
    import sysconfig

    _stdlib_file = Path(sysconfig.get_paths()["stdlib"]) / "profile.py"
    if not _stdlib_file.is_file():
        raise ImportError(f"profile.py in the AutoKernel project shadows the standard library's profile module, "
                          f"and the real one was not found at {_stdlib_file}")
    _spec = importlib.util.spec_from_file_location("profile", _stdlib_file)
    _stdlib_profile = importlib.util.module_from_spec(_spec)
    sys.modules["profile"] = _stdlib_profile
    _spec.loader.exec_module(_stdlib_profile)


if __name__ == "__main__":
    from autokernel.profile.profile_command import main

    sys.exit(main())
