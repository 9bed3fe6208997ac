"""ssmc: run state-space language models (Mamba, Mamba-2, hybrids) from
Python, through the ssmc C library (libssmc.so) and ctypes.

    import ssmc
    m = ssmc.Model("models/pymamba", backend="cpu")
    print(m.generate("def f():", max_tokens=16))

The library is SSMC_LIBRARY when that is set (a path), else what the
loader finds (libssmc.so). python/README.md is the guide.
"""

import ctypes

from ._capi import (CancelledError, DeviceError, Error, FileError, InternalError,
                    InvalidError, LibraryNotFoundError, NoMemoryError, UnsupportedError,
                    check as _check, lib as _lib, text as _text)
from ._model import Model, Session, Snapshot, Tokenizer

__all__ = ["Model", "Session", "Snapshot", "Tokenizer", "Error", "InvalidError", "FileError",
           "NoMemoryError", "UnsupportedError", "DeviceError", "InternalError",
           "CancelledError", "LibraryNotFoundError", "version", "devices"]


def version():
    """The C library's version ("0.2.0"), as `ssmc --version` prints it."""
    return _text(_lib().ssmc_version())


def devices():
    """The Vulkan devices, in index order: a list of dicts with index, name,
    type, driver, usable, is_default, memory_bytes, max_buffer_bytes and
    subgroup_size. No Vulkan driver at all raises Error."""
    from . import _capi
    array = ctypes.POINTER(_capi.Device)()
    n = ctypes.c_int()
    _check(_lib().ssmc_devices(ctypes.byref(array), ctypes.byref(n)))
    try:
        return [{"index": d.index, "name": d.name.decode("utf-8", "replace"),
                 "type": _text(d.type), "driver": d.driver.decode("utf-8", "replace"),
                 "usable": bool(d.usable), "is_default": bool(d.is_default),
                 "memory_bytes": d.memory_bytes, "max_buffer_bytes": d.max_buffer_bytes,
                 "subgroup_size": d.subgroup_size} for d in array[:n.value]]
    finally:
        _capi.free(array)
