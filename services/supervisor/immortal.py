"""Preloaded objects made immortal before the services are forked (CPython 3.12 and 3.13).

A forked service writes the reference count of every object it touches, even one it never
changes (a module's function it calls, a constant, a class attribute), and the page the object
lives on becomes a private copy in that service. CPython 3.12 does not count references to
immortal objects (PEP 683: None, small ints, interned strings...), and any object whose count
holds the immortal value is treated the same way. Marking what the supervisor imported, just
before it forks, leaves those pages shared. Marked objects are never freed: they are the modules
the services keep for their whole life.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import sysconfig
import types

# CPython 3.12 and 3.13 on 64-bit platforms: an object is immortal when the low 32 bits of
# ob_refcnt are all set (Include/object.h: _Py_IMMORTAL_REFCNT, _Py_IsImmortal); Py_INCREF and
# Py_DECREF then leave it alone. Other versions lay the count out differently: nothing is done.
_IMMORTAL_LOW_BITS = 0xFFFFFFFF
_VERSIONS = ((3, 12), (3, 13))


def supported() -> bool:
    # A free-threaded build (3.13t) counts references in other fields.
    return (sys.implementation.name == "cpython" and sys.version_info[:2] in _VERSIONS
            and sys.maxsize > 2**32 and sys.byteorder == "little"
            and not sysconfig.get_config_var("Py_GIL_DISABLED"))


def _mark(obj: object) -> None:
    ctypes.c_uint32.from_address(id(obj)).value = _IMMORTAL_LOW_BITS


def _mark_untracked(obj: object) -> int:
    """An object the collector does not track, and what it holds: an untracked tuple holds only
    untracked objects; a code object (never tracked) its constants and names."""
    _mark(obj)
    count = 1
    if type(obj) is tuple:
        for item in obj:
            count += _mark_untracked(item)
    elif type(obj) is types.CodeType:
        for part in (obj.co_consts, obj.co_names, obj.co_varnames, obj.co_freevars, obj.co_cellvars,
                     obj.co_filename, obj.co_name, obj.co_qualname, obj.co_linetable, obj.co_exceptiontable):
            count += _mark_untracked(part) if not gc.is_tracked(part) else 0
    return count


def immortalize_all() -> int:
    """Mark every object the collector tracks, and the untracked objects they hold (strings,
    numbers, code), immortal; how many marks were made (an object held twice counts twice).
    Only before forking, with one thread, and with no collection running (gc.disable())."""
    if not supported():
        return 0
    marks = 0
    for obj in gc.get_objects():
        _mark(obj)
        marks += 1
        for ref in gc.get_referents(obj):
            if not gc.is_tracked(ref):
                marks += _mark_untracked(ref)
    return marks
