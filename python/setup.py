"""The package's one compiled module, creditflow._cdecode (docs/python.md, "The compiled
decoder"). It is optional: where no C compiler is found the package installs without it and
decodes in Python, the same values more slowly. Built with numpy's headers where numpy is
there to build with (pyproject.toml asks for it), it makes its numpy views with numpy's C API;
without them, with numpy.frombuffer (creditflow._native.numpy_headers decides, as for the
build on first use). Everything else is in pyproject.toml."""

import importlib.util
import os

from setuptools import Extension, setup

# _native by its path: importing the package would need its dependencies at build time
_spec = importlib.util.spec_from_file_location(
    "_creditflow_native", os.path.join(os.path.dirname(os.path.abspath(__file__)), "creditflow", "_native.py"))
_native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_native)
npy = _native.numpy_headers()
setup(ext_modules=[Extension("creditflow._cdecode", ["creditflow/_cdecode.c"], include_dirs=[npy[0]] if npy else [],
                             define_macros=[("CREDITFLOW_NUMPY_API", None)] if npy else [], optional=True)])
