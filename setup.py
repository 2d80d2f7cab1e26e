"""Builds the wheel with the tool's own files inside the package: see LAYOUT_FILES.

pyproject.toml holds the metadata; this file only adds one step to build_py. The judge (bench.py),
the front doors, the playbook (program.md) and the starter kernels (kernels/) live at the top of
the clone, where the layout puts them. An installed package needs them too, so the wheel carries
copies in autokernel/_layout/, where autokernel/core/paths.py looks when there is no clone around the
package. An editable install (pip install -e .) uses the clone's own files and copies nothing.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LAYOUT_FILES = ["bench.py", "profile.py", "extract.py", "verify.py", "orchestrate.py", "reference.py",
                "program.md", "kernels/*.py"]


class BuildWithLayout(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "autokernel" / "_layout"
        for pattern in LAYOUT_FILES:
            sources = sorted(Path().glob(pattern))
            if not sources:
                raise FileNotFoundError(f"building the wheel: nothing matches {pattern} in {Path.cwd()}")
            for source in sources:
                self.mkpath(str((target / source).parent))
                self.copy_file(str(source), str(target / source))


setup(cmdclass={"build_py": BuildWithLayout})
