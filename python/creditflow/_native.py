"""The compiled decoder, creditflow._cdecode, where it can be had (docs/python.md, "The
compiled decoder").

_avro_fast compiles a record schema into the source of one Python function; this module
compiles it instead into a program of nested tuples that _cdecode.c follows, giving exactly
the same values (and falling back to the checking decoder where the Python function would).

Where it comes from:
- `pip install` builds it with the package (setup.py; optional: without a C compiler the
  package installs without it and decodes in Python);
- a package used from its source folder (PYTHONPATH) builds it on first use into
  $XDG_CACHE_HOME/creditflow/native/ (default ~/.cache), named by a hash of its source and the
  interpreter, with the compiler and flags Python was built with (sysconfig's LDSHARED, CFLAGS), once per
  machine; several processes starting at once each build and rename atomically into place.

CREDITFLOW_NATIVE=0 turns it off (the Python decoder alone); CREDITFLOW_NATIVE=1 makes its
absence an error (ImportError naming what failed) instead of a quiet fallback.
"""

import copy
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile

log = logging.getLogger("creditflow")

__all__ = ["module", "program"]

OP_NULL, OP_BOOL, OP_INT, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_STRING, OP_BYTES, OP_PACKED, OP_UNION, OP_ARRAY, \
    OP_RECORD = range(12)
_SIMPLE = {"null": OP_NULL, "boolean": OP_BOOL, "int": OP_INT, "long": OP_LONG, "float": OP_FLOAT,
           "double": OP_DOUBLE, "string": OP_STRING, "bytes": OP_BYTES}

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cdecode.c")
_NAME = __name__.rsplit(".", 1)[0] + "._cdecode"
_loaded = None  # None: not tried yet; False: not available; else the module
numpy_api = False  # whether the loaded module makes its numpy views with numpy's C API


def _mode():
    v = os.environ.get("CREDITFLOW_NATIVE", "").strip().lower()
    if v in ("0", "false", "no", "off"):
        return "off"
    if v in ("1", "true", "yes", "on", "require"):
        return "require"
    return "auto"


def module():
    """The _cdecode module, or None (CREDITFLOW_NATIVE=0, or it could not be built: the
    reason is logged once at debug level; with CREDITFLOW_NATIVE=1 it is raised instead)."""
    global _loaded
    if _loaded is None:
        mode = _mode()
        if mode == "off":
            _loaded = False
        else:
            try:
                _loaded = _load()
            except (ImportError, OSError, subprocess.SubprocessError) as e:
                if mode == "require":
                    raise ImportError("creditflow: the compiled decoder is required (CREDITFLOW_NATIVE=1) and "
                                      "could not be had: %s" % e) from e
                log.debug("creditflow: decoding in Python; the compiled decoder could not be had: %s", e)
                _loaded = False
            else:
                from ._avro_fast import _Fallback
                import numpy as np
                global numpy_api
                numpy_api = _loaded.init(_Fallback, np.frombuffer)
    return _loaded or None


def numpy_headers():
    """(include directory, version) of the installed numpy where it ships its C headers: the
    decoder is then built with CREDITFLOW_NUMPY_API and makes its views with numpy's C API.
    None without numpy or its headers (the views are made by numpy.frombuffer). setup.py
    calls this too (this module imports nothing of the package at its top)."""
    try:
        import numpy as np
    except ImportError:
        return None
    inc = np.get_include()
    if not os.path.exists(os.path.join(inc, "numpy", "arrayobject.h")):
        return None
    return inc, np.__version__


def _load():
    try:  # built by pip install (or in place)
        return importlib.import_module(_NAME)
    except ImportError:
        pass
    if not os.path.exists(_SOURCE):
        raise ImportError("neither an installed %s nor its source %s" % (_NAME, _SOURCE))
    with open(_SOURCE, "rb") as f:
        src = f.read()
    npy = numpy_headers()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    # compiled and linked in one step as setuptools would build it: the interpreter's own
    # compiler and flags (optimised, NDEBUG), position-independent, its headers and numpy's
    cmd = [*shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared"),
           *shlex.split(sysconfig.get_config_var("CFLAGS") or "-O2 -DNDEBUG"),
           *shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC"), "-I", sysconfig.get_paths()["include"],
           *(["-I", npy[0], "-DCREDITFLOW_NUMPY_API"] if npy else []), _SOURCE]
    # named by what it is built from: the source, the interpreter, the flags and numpy's version
    key = hashlib.sha256(b"\0".join([src, sys.version.encode(), suffix.encode(), " ".join(cmd).encode(),
                                     (npy[1] if npy else "").encode()])).hexdigest()[:16]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "creditflow", "native", key)
    path = os.path.join(cache, "_cdecode" + suffix)
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=suffix, dir=cache)
        os.close(fd)
        try:
            cmd += ["-o", tmp]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
            if r.returncode != 0:
                raise ImportError("building %s failed (%s): %s" % (_NAME, " ".join(cmd),
                                                                    r.stdout.decode(errors="replace")[-2000:]))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    loader = importlib.machinery.ExtensionFileLoader(_NAME, path)
    spec = importlib.util.spec_from_file_location(_NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules[_NAME] = mod
    return mod


def program(writer, reader, packed=None):
    """The program of _cdecode.decode for records written with `writer` read as `reader`
    (parsed JSON schemas), as _avro_fast.compile_decoder reads them: packed maps top-level
    bytes fields to numpy dtypes (read as views). Raises ValueError for the schema types the
    fast decoders do not read (the caller keeps the checking decoder alone)."""
    import numpy as np
    packed = {k: np.dtype(v) for k, v in (packed or {}).items()}
    named = {}

    def node(w, r, pk=None):
        if isinstance(w, str) and w in named:
            w, r = named[w]
        if isinstance(w, list):
            if len(w) != 2 or w[0] != "null":
                raise ValueError("only [\"null\", T] unions")
            return (OP_UNION, node(w[1], r[1] if isinstance(r, list) else w[1], pk))
        t = w if isinstance(w, str) else w["type"]
        if t == "record":
            return record(w, r if isinstance(r, dict) and r.get("type") == "record" else w, False)
        if t == "array":
            ri = r["items"] if isinstance(r, dict) and r.get("type") == "array" else w["items"]
            return (OP_ARRAY, node(w["items"], ri))
        if t == "bytes" and pk is not None:
            return (OP_PACKED, pk, pk.itemsize)
        if t not in _SIMPLE:
            raise ValueError("schema type %r" % (t,))
        return (_SIMPLE[t],)

    def record(w, r, top):
        named[w["name"]] = (w, r)
        rfields = {f["name"]: f for f in r["fields"]}
        keys, nodes = [], []
        for f in w["fields"]:
            rf = rfields.get(f["name"])
            nodes.append(node(f["type"], rf["type"] if rf is not None else f["type"],
                              packed.get(f["name"]) if top else None))
            keys.append(sys.intern(f["name"]) if rf is not None else None)
        wnames = {f["name"] for f in w["fields"]}
        defaults = []
        for f in r["fields"]:
            if f["name"] not in wnames:
                d = f["default"]
                defaults.append((sys.intern(f["name"]), d,
                                 (lambda d=d: copy.deepcopy(d)) if isinstance(d, (list, dict)) else None))
        return (OP_RECORD, tuple(keys), tuple(nodes), tuple(defaults))

    return record(writer, reader, True)
