"""What every test process starts from.

- On a machine without a CUDA GPU, Triton's interpreter, switched on as the package's entry points switch it
  (autokernel/core/interpreter.py), so in-process tests run kernels as the judge's worker does, at its speed.
- The `slow` tests first (in their files' order), then the rest, and pytest-xdist handing out one test at a time: the
  minutes-long ones start at once and the many short ones fill the workers' ends, instead of one worker running the
  last long test alone while the other has finished. (xdist's default hands each worker a quarter of the suite at
  once: with the slow tests first, all of them to one worker.)
"""

from autokernel.core import interpreter

interpreter.choose()


def pytest_configure(config):
    if getattr(config.option, "maxschedchunk", "absent") is None:       # xdist is there and not told otherwise
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)       # stable: files keep their order
