"""Runs the pod as on an interpreter without numpy (torch 2.x wheels do not bring it).

block() makes every later `import numpy` raise ModuleNotFoundError, as a missing package
does, and makes Tensor.numpy() raise torch's own "Numpy is not available". torch is
imported first: some torch builds (Debian's 1.13) import numpy while torch itself loads.

    python3 -c 'import tests.nonumpy as n; n.block(); n.main()' [unittest arguments]
"""

import importlib.abc
import sys


class _NoNumpy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the pod must run without numpy)",
                                      name=name)
        return None


def block():
    import torch

    for name in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _NoNumpy())

    def no_numpy(self, *a, **k):
        raise RuntimeError("Numpy is not available")
    torch.Tensor.numpy = no_numpy


def main():
    import unittest
    unittest.main(module=None, argv=["python3 -m unittest"] + sys.argv[1:])


if __name__ == "__main__":
    block()
    main()
