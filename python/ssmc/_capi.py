"""The C library under the package: finding it, its types, and its statuses.

Everything here is a thin ctypes mirror of runtime/ssmc.h (the structs in the
order of their fields there); the classes users see are in _model.py.
"""

import ctypes
import ctypes.util
import os

# ---- errors -------------------------------------------------------------------


class Error(Exception):
    """An ssmc_status failure: ``str(e)`` is the library's message (it says
    where and what), ``e.code`` the ssmc_code (an int)."""

    code = None

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidError(Error):
    """SSMC_ERR_INVALID: bad input (a file, a model, an argument)."""
    code = 1


class FileError(Error):
    """SSMC_ERR_IO: a file could not be read or written."""
    code = 2


class NoMemoryError(Error):
    """SSMC_ERR_NOMEM: out of host memory."""
    code = 3


class UnsupportedError(Error):
    """SSMC_ERR_UNSUPPORTED: valid input this version does not handle."""
    code = 4


class DeviceError(Error):
    """SSMC_ERR_DEVICE: the Vulkan device failed or lacks a feature."""
    code = 5


class InternalError(Error):
    """SSMC_ERR_INTERNAL: a bug in ssmc, reported rather than crashed."""
    code = 6


class CancelledError(Error):
    """SSMC_ERR_CANCELLED: a callback asked to stop."""
    code = 7


class LibraryNotFoundError(Error, OSError):
    """The shared library (libssmc.so) could not be loaded."""


_BY_CODE = {c.code: c for c in (InvalidError, FileError, NoMemoryError, UnsupportedError,
                                DeviceError, InternalError, CancelledError)}

# ---- types ----------------------------------------------------------------------

status_t = ctypes.c_void_p
token_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_void_p)
logits_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_int64,
                             ctypes.c_int64, ctypes.c_void_p)
progress_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64,
                               ctypes.c_uint64, ctypes.c_void_p)

BACKENDS = {"vulkan": 0, "cpu": 1, "auto": 2}
DTYPES = {"auto": 0, "f32": 1, "f16": 2, "bf16": 3, "q8_0": 4, "q4_0": 5}


class Options(ctypes.Structure):
    """ssmc_options."""
    _fields_ = [("backend", ctypes.c_int), ("device", ctypes.c_int),
                ("validation", ctypes.c_int), ("weights", ctypes.c_char_p),
                ("config", ctypes.c_char_p), ("tokenizer", ctypes.c_char_p),
                ("chunk", ctypes.c_int), ("max_seq", ctypes.c_int), ("slots", ctypes.c_int),
                ("no_fuse", ctypes.c_int), ("dtype", ctypes.c_int), ("eos", ctypes.c_int64),
                ("cache_dir", ctypes.c_char_p), ("progress", progress_fn),
                ("progress_user", ctypes.c_void_p)]


class GenerateOptions(ctypes.Structure):
    """ssmc_generate_options."""
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int),
                ("top_p", ctypes.c_float), ("seed", ctypes.c_uint32),
                ("host_greedy", ctypes.c_int), ("step", ctypes.c_uint32),
                ("stop_at_eos", ctypes.c_int), ("on_token", token_fn),
                ("on_logits", logits_fn), ("user", ctypes.c_void_p),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float)]


class Device(ctypes.Structure):
    """ssmc_device."""
    _fields_ = [("index", ctypes.c_int), ("name", ctypes.c_char * 256),
                ("type", ctypes.c_char_p), ("driver", ctypes.c_char * 256),
                ("api_version", ctypes.c_uint32), ("usable", ctypes.c_int),
                ("is_default", ctypes.c_int), ("memory_bytes", ctypes.c_uint64),
                ("max_buffer_bytes", ctypes.c_uint64), ("subgroup_size", ctypes.c_uint32)]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I32P = ctypes.POINTER(ctypes.c_int32)
_SIZEP = ctypes.POINTER(ctypes.c_size_t)

# name: (restype, argtypes)
_PROTOTYPES = {
    "ssmc_version": (ctypes.c_char_p, []),
    "ssmc_status_code": (ctypes.c_int, [status_t]),
    "ssmc_status_message": (ctypes.c_char_p, [status_t]),
    "ssmc_status_free": (None, [status_t]),
    "ssmc_devices": (status_t, [ctypes.POINTER(ctypes.POINTER(Device)),
                                ctypes.POINTER(ctypes.c_int)]),
    "ssmc_tokenizer_open": (status_t, [ctypes.c_char_p, _PP]),
    "ssmc_tokenizer_close": (None, [_P]),
    "ssmc_tokenizer_encode": (status_t, [_P, ctypes.c_char_p, ctypes.c_size_t,
                                         ctypes.POINTER(_I32P), _SIZEP]),
    "ssmc_tokenizer_decode": (status_t, [_P, _I32P, ctypes.c_size_t, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_void_p), _SIZEP]),
    "ssmc_tokenizer_vocab_size": (ctypes.c_int32, [_P]),
    "ssmc_tokenizer_token_id": (ctypes.c_int32, [_P, ctypes.c_char_p]),
    "ssmc_decoder_create": (status_t, [_P, ctypes.c_int, _PP]),
    "ssmc_decoder_destroy": (None, [_P]),
    "ssmc_decoder_feed": (status_t, [_P, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                     _SIZEP]),
    "ssmc_decoder_flush": (status_t, [_P, ctypes.POINTER(ctypes.c_void_p), _SIZEP]),
    "ssmc_options_init": (None, [ctypes.POINTER(Options)]),
    "ssmc_session_open": (status_t, [ctypes.c_char_p, ctypes.POINTER(Options), _PP]),
    "ssmc_session_close": (None, [_P]),
    "ssmc_session_vocab": (ctypes.c_int64, [_P]),
    "ssmc_session_chunk": (ctypes.c_int, [_P]),
    "ssmc_session_eos": (ctypes.c_int64, [_P]),
    "ssmc_session_dtype": (ctypes.c_char_p, [_P]),
    "ssmc_session_position": (ctypes.c_int64, [_P]),
    "ssmc_session_max_seq": (ctypes.c_int64, [_P]),
    "ssmc_session_architecture": (ctypes.c_char_p, [_P]),
    "ssmc_session_device": (ctypes.c_char_p, [_P]),
    "ssmc_session_model_dir": (ctypes.c_char_p, [_P]),
    "ssmc_session_tokenizer": (status_t, [_P, _PP]),
    "ssmc_session_feed": (status_t, [_P, _I32P, ctypes.c_size_t, logits_fn, _P]),
    "ssmc_generate_options_init": (None, [ctypes.POINTER(GenerateOptions)]),
    "ssmc_session_generate_defaults": (status_t, [_P, ctypes.POINTER(GenerateOptions),
                                                  ctypes.POINTER(ctypes.c_char_p)]),
    "ssmc_session_is_eos": (ctypes.c_int, [_P, ctypes.c_int32]),
    "ssmc_session_generate": (status_t, [_P, _I32P, ctypes.c_size_t, ctypes.c_int,
                                         ctypes.POINTER(GenerateOptions), _I32P, _SIZEP]),
    "ssmc_session_reset": (status_t, [_P]),
    "ssmc_session_save_state": (status_t, [_P, ctypes.c_char_p]),
    "ssmc_session_load_state": (status_t, [_P, ctypes.c_char_p]),
    "ssmc_session_snapshot": (status_t, [_P, _PP]),
    "ssmc_session_restore": (status_t, [_P, _P]),
    "ssmc_snapshot_free": (None, [_P]),
    "ssmc_snapshot_position": (ctypes.c_int64, [_P]),
    "ssmc_snapshot_bytes": (ctypes.c_uint64, [_P]),
    "ssmc_session_fork": (status_t, [_P, _PP]),
    "ssmc_session_slots": (ctypes.c_int, [_P]),
    "ssmc_session_join_slot": (status_t, [_P, ctypes.c_int, ctypes.POINTER(GenerateOptions)]),
    "ssmc_session_take_slot": (status_t, [_P, ctypes.c_int]),
    "ssmc_session_leave_slot": (status_t, [_P, ctypes.c_int]),
    "ssmc_session_step_slots": (status_t, [_P, _I32P, ctypes.c_int, _I32P]),
}

_lib = None
_libc = None


def _candidates():
    env = os.environ.get("SSMC_LIBRARY")
    if env:
        return [env], True
    names = [ctypes.util.find_library(n) for n in ("ssmc", "ssmc-runtime")]
    return [n for n in names if n] + ["libssmc.so", "libssmc-runtime.so"], False


def lib():
    """The loaded library (loaded on first use), its prototypes set."""
    global _lib, _libc
    if _lib is not None:
        return _lib
    names, from_env = _candidates()
    errors = []
    for name in names:
        try:
            loaded = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        where = ("SSMC_LIBRARY=%s could not be loaded (%s)" % (names[0], errors[0])
                 if from_env else "libssmc.so was not found by the loader")
        raise LibraryNotFoundError(
            "ssmc: %s; set SSMC_LIBRARY to the path of libssmc.so (cmake --install puts it "
            "in PREFIX/lib; a build tree has it in build/), or add its directory to "
            "LD_LIBRARY_PATH" % where)
    for name, (restype, argtypes) in _PROTOTYPES.items():
        f = getattr(loaded, name)
        f.restype = restype
        f.argtypes = argtypes
    _libc = ctypes.CDLL(None)
    _libc.free.argtypes = [ctypes.c_void_p]
    _libc.free.restype = None
    _lib = loaded
    return _lib


def free(pointer):
    """free() of what the library malloc'd for us."""
    _libc.free(pointer)


def check(status):
    """Raises the Error of a failed ssmc_status (freeing it); None passes."""
    if not status:
        return
    c = lib()
    code = c.ssmc_status_code(status)
    message = c.ssmc_status_message(status).decode("utf-8", "replace")
    c.ssmc_status_free(status)
    raise _BY_CODE.get(code, Error)(message, code)


def text(value):
    """A char * result as str (None stays None)."""
    return None if value is None else value.decode("utf-8", "replace")
