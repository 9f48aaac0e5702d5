"""The package's one compiled module, creditflow._cdecode (docs/python.md, "The compiled
decoder"). It is optional: where no C compiler is found the package installs without it and
decodes in Python, the same values more slowly. Built with numpy's headers where numpy is
there to build with (pyproject.toml asks for it), it makes its numpy views with numpy's C API;
without them, with numpy.frombuffer. Everything else is in pyproject.toml."""

import os

from setuptools import Extension, setup


def _numpy():
    """(include_dirs, define_macros) for numpy's C API; empty where numpy is not installed
    (an offline build without build isolation, before numpy)."""
    try:
        import numpy as np
    except ImportError:
        return [], []
    inc = np.get_include()
    if not os.path.exists(os.path.join(inc, "numpy", "arrayobject.h")):
        return [], []
    return [inc], [("CREDITFLOW_NUMPY_API", None)]


include_dirs, define_macros = _numpy()
setup(ext_modules=[Extension("creditflow._cdecode", ["creditflow/_cdecode.c"], include_dirs=include_dirs,
                             define_macros=define_macros, optional=True)])
