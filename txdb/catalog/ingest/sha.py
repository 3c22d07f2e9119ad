"""A file's sha256 that follows its growth without reading it again.

Refresh records each file's sha256 (``files.sha256``) and reads a grown
file from its cursor only; re-hashing the whole file on every appended line
would cost a read of all of it (about 0.1 s for a 100 MB session). So the
hash keeps its running state (``files.sha_state``): the SHA-256 context of
the libcrypto this Python's ``hashlib`` already loaded, whose bytes (the
eight state words, the length, the pending block) can be stored and
resumed. The backend is used only after a self-test shows a resumed state
gives hashlib's digest; without it (no such library found, another layout)
``state`` is None and a grown file is hashed again from its start.
"""

from __future__ import annotations

import ctypes
import hashlib
import os

CTX_BYTES = 112  # SHA256_CTX: h[8], Nl, Nh, data[16], num, md_len (32-bit words)
CHUNK = 1 << 20


def _libcrypto():
    """The libcrypto already mapped into this process (by hashlib), on Linux;
    never a library loaded for the first time (which some systems refuse)."""
    import _hashlib  # noqa: F401  (maps libcrypto)

    try:
        with open("/proc/self/maps") as fh:
            paths = [line.split()[-1] for line in fh if "libcrypto" in line and "/" in line]
    except OSError:
        return None
    for path in dict.fromkeys(paths):
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_NOW | ctypes.RTLD_GLOBAL)
            for name in ("SHA256_Init", "SHA256_Update", "SHA256_Final"):
                getattr(lib, name).restype = ctypes.c_int
            lib.SHA256_Update.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)
            return lib
        except (OSError, AttributeError):
            continue
    return None


class Running:
    """A SHA-256 whose state can be stored (``state``) and resumed."""

    def __init__(self, lib, state: bytes | None = None):
        self._lib = lib
        self._ctx = ctypes.create_string_buffer(256)  # room beyond CTX_BYTES, never stored
        if state is None:
            lib.SHA256_Init(self._ctx)
        else:
            ctypes.memmove(self._ctx, state, CTX_BYTES)

    def update(self, data: bytes) -> None:
        if data:
            self._lib.SHA256_Update(self._ctx, data, len(data))

    @property
    def state(self) -> bytes:
        return self._ctx.raw[:CTX_BYTES]

    def hexdigest(self) -> str:
        ctx = ctypes.create_string_buffer(self._ctx.raw, 256)
        out = ctypes.create_string_buffer(32)
        self._lib.SHA256_Final(out, ctx)
        return out.raw.hex()


class _Hashlib:
    """The fallback: hashlib, whose state cannot be stored."""

    def __init__(self):
        self._h = hashlib.sha256()

    def update(self, data: bytes) -> None:
        self._h.update(data)

    state = None

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _self_test(lib) -> bool:
    try:
        a, b = os.urandom(100), os.urandom(1000)
        h = Running(lib)
        h.update(a)
        resumed = Running(lib, h.state)
        resumed.update(b)
        first = h.hexdigest()
        return first == hashlib.sha256(a).hexdigest() and resumed.hexdigest() == hashlib.sha256(a + b).hexdigest()
    except Exception:
        return False


_LIB = None
_CHECKED = False


def _lib():
    global _LIB, _CHECKED
    if not _CHECKED:
        _CHECKED = True
        try:
            lib = _libcrypto()
        except Exception:
            lib = None
        _LIB = lib if lib is not None and _self_test(lib) else None
    return _LIB


def new(state: bytes | None = None):
    """A running hash: resumed from ``state`` when given (which needs the
    backend: without it, None is returned for a state, and the caller
    hashes from the start)."""
    lib = _lib()
    if lib is None:
        return None if state is not None else _Hashlib()
    if state is not None and len(state) != CTX_BYTES:
        return None
    return Running(lib, state)


def hash_range(h, fh, start: int, end: int) -> None:
    """Feed bytes ``[start, end)`` of ``fh`` to ``h``."""
    fh.seek(start)
    left = end - start
    while left > 0:
        chunk = fh.read(min(left, CHUNK))
        if not chunk:
            raise OSError(f"file shorter than {end} bytes")
        h.update(chunk)
        left -= len(chunk)
