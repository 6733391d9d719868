#!/usr/bin/env python3
"""ggml_ref.py: llama.cpp's own library as the referee of probe's GGUF reader.

Calls the prebuilt CPU library of npm @node-llama-cpp/linux-x64@3.21.1
(installed by .ci/setup.sh into third_party/node-llama-cpp) through ctypes;
no PyPI packages. LIBDIR is the folder holding libggml-base.so and
libllama*.so.

  ggml_ref.py LIBDIR traits TYPE...
      one line per ggml type number: "TYPE NAME BLCK_SIZE TYPE_SIZE"
  ggml_ref.py LIBDIR dequant < JOBS
      JOBS: lines "TYPE N IN OUT": the N values of type TYPE stored in file IN
      are widened by ggml_get_type_traits(TYPE)->to_float and written to OUT
      as little-endian float32 (F32, which has no to_float, is copied; Q8_K,
      whose traits have none, goes through the exported dequantize_row_q8_K)
  ggml_ref.py LIBDIR quantize IN OUT FTYPE [NTHREAD]
      llama_model_quantize(IN, OUT) with llama_model_quantize_default_params(),
      ftype FTYPE (enum llama_ftype) and NTHREAD threads (default 1; the
      quantized bytes do not depend on it)
"""
import ctypes
import glob
import os
import sys


class TypeTraits(ctypes.Structure):
    # ggml.h: struct ggml_type_traits
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


def ggml_base(libdir):
    lib = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    return lib


def traits(libdir, types):
    lib = ggml_base(libdir)
    for t in types:
        tr = lib.ggml_get_type_traits(int(t)).contents
        print(t, (tr.type_name or b"?").decode(), tr.blck_size, tr.type_size)


def dequant(libdir, lines):
    lib = ggml_base(libdir)
    for line in lines:
        if not line.strip():
            continue
        t, n, src, dst = line.split()
        t, n = int(t), int(n)
        tr = lib.ggml_get_type_traits(t).contents
        raw = open(src, "rb").read()
        if t == 0:  # F32 has no to_float in ggml: its values are the bytes
            open(dst, "wb").write(raw)
            continue
        to_float = tr.to_float
        if not to_float:  # Q8_K's traits have none; the library exports its row function
            fn = getattr(lib, "dequantize_row_" + tr.type_name.decode(), None)
            if fn is None:
                sys.exit("ggml_ref: type %d has no to_float" % t)
            to_float = ctypes.cast(fn, ctypes.c_void_p).value
        want = n // tr.blck_size * tr.type_size
        if n % tr.blck_size or len(raw) != want:
            sys.exit("ggml_ref: %s: %d values of type %d need %d bytes, file has %d" % (src, n, t, want, len(raw)))
        buf = ctypes.create_string_buffer(raw, len(raw))
        out = (ctypes.c_float * n)()
        TO_FLOAT(to_float)(ctypes.cast(buf, ctypes.c_void_p), out, n)
        with open(dst, "wb") as f:
            f.write(bytes(out))


class QuantizeParams(ctypes.Structure):
    # llama.h: llama_model_quantize_params starts with int32 nthread and
    # enum llama_ftype ftype; the rest is kept as the library's defaults, in a
    # buffer larger than the struct.
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("rest", ctypes.c_uint8 * 504)]


def quantize(libdir, src, dst, ftype, nthread=1):
    ctypes.CDLL(os.path.join(libdir, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    libs = sorted(glob.glob(os.path.join(libdir, "libllama.*so*")))
    if not libs:
        sys.exit("ggml_ref: no libllama in " + libdir)
    lib = ctypes.CDLL(libs[0])
    lib.llama_backend_init()
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    p = lib.llama_model_quantize_default_params()
    p.nthread, p.ftype = int(nthread), int(ftype)
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    rc = lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit("ggml_ref: llama_model_quantize %s -> %s (ftype %s) failed: %d" % (src, dst, ftype, rc))


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    libdir, cmd = argv[1], argv[2]
    if cmd == "traits":
        traits(libdir, argv[3:])
    elif cmd == "dequant":
        dequant(libdir, sys.stdin.read().splitlines())
    elif cmd == "quantize" and len(argv) in (6, 7):
        quantize(libdir, *argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
