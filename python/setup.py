"""The package's one compiled module, creditflow._cdecode (docs/python.md, "The compiled
decoder"). It is optional: where no C compiler is found the package installs without it and
decodes in Python, the same values more slowly. Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("creditflow._cdecode", ["creditflow/_cdecode.c"], optional=True)])
