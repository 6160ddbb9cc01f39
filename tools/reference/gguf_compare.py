#!/usr/bin/python3
"""gguf_compare.py - compares two GGUF files key by key and tensor by tensor.

    gguf_compare.py A.gguf B.gguf [--ulp-ok NAME_SUFFIX ...]

Reports, in file order: keys that differ in name, order, type or value; tensors that differ in
name, order, type, shape or bytes.  For F32 tensors whose name ends in one of the --ulp-ok
suffixes (e.g. ssm_a), elements at most 1 ulp apart count as equal and are reported as such.
Exit status 0 when the files are equal (up to those ulps), 1 otherwise.  Reads the files with its
own minimal GGUF parser (no gguf-py needed).
"""
import argparse
import struct
import sys

import numpy as np

# GGUF value types
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.b = f.read()
        self.o = 0
        magic, self.version = struct.unpack_from("<4sI", self.b, 0)
        if magic != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        self.o = 8
        n_t, n_kv = struct.unpack_from("<QQ", self.b, self.o)
        self.o += 16
        self.kv = []
        for _ in range(n_kv):
            k = self.str()
            t = self.u32()
            self.kv.append((k, t, self.value(t)))
        self.tensors = []
        for _ in range(n_t):
            name = self.str()
            nd = self.u32()
            ne = struct.unpack_from(f"<{nd}Q", self.b, self.o)
            self.o += 8 * nd
            typ = self.u32()
            off = struct.unpack_from("<Q", self.b, self.o)[0]
            self.o += 8
            self.tensors.append([name, typ, ne, off])
        align = dict((k, v) for k, _, v in self.kv).get("general.alignment", 32)
        self.data = (self.o + align - 1) // align * align
        ends = sorted(t[3] for t in self.tensors) + [len(self.b) - self.data]
        for t in self.tensors:
            nxt = min(e for e in ends if e > t[3]) if any(e > t[3] for e in ends) else len(self.b) - self.data
            t.append(self.b[self.data + t[3]:self.data + nxt])

    def u32(self):
        v = struct.unpack_from("<I", self.b, self.o)[0]
        self.o += 4
        return v

    def str(self):
        n = struct.unpack_from("<Q", self.b, self.o)[0]
        self.o += 8
        s = self.b[self.o:self.o + n].decode("utf-8")
        self.o += n
        return s

    def value(self, t):
        if t in _SCALAR:
            v = struct.unpack_from(_SCALAR[t], self.b, self.o)[0]
            self.o += struct.calcsize(_SCALAR[t])
            return v
        if t == 8:
            return self.str()
        if t == 9:
            et = self.u32()
            n = struct.unpack_from("<Q", self.b, self.o)[0]
            self.o += 8
            return (et, [self.value(et) for _ in range(n)])
        sys.exit(f"unknown GGUF value type {t}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--ulp-ok", nargs="*", default=[])
    a = ap.parse_args()
    A, B = Reader(a.a), Reader(a.b)
    bad = 0
    for i in range(max(len(A.kv), len(B.kv))):
        ka = A.kv[i] if i < len(A.kv) else None
        kb = B.kv[i] if i < len(B.kv) else None
        if ka != kb:
            bad += 1
            show = lambda k: None if k is None else (k[0], k[1], k[2] if not isinstance(k[2], tuple) or len(k[2][1]) < 8
                                                      else f"array[{len(k[2][1])}] of type {k[2][0]}")
            print(f"key {i}: {show(ka)} != {show(kb)}")
    ulps = 0
    for i in range(max(len(A.tensors), len(B.tensors))):
        ta = A.tensors[i] if i < len(A.tensors) else None
        tb = B.tensors[i] if i < len(B.tensors) else None
        if ta is None or tb is None or ta[:3] != tb[:3]:
            bad += 1
            print(f"tensor {i}: {None if ta is None else ta[:3]} != {None if tb is None else tb[:3]}")
            continue
        if ta[4] == tb[4]:
            continue
        if ta[1] == 0 and any(ta[0].endswith(s) for s in a.ulp_ok) and len(ta[4]) == len(tb[4]):
            x = np.frombuffer(ta[4], dtype="<i4").astype(np.int64)
            y = np.frombuffer(tb[4], dtype="<i4").astype(np.int64)
            d = np.abs(x - y)
            if d.max() <= 1:
                ulps += int((d > 0).sum())
                print(f"tensor {ta[0]}: {int((d > 0).sum())} element(s) 1 ulp apart")
                continue
        bad += 1
        print(f"tensor {ta[0]}: data differs")
    print(f"{len(A.kv)} keys, {len(A.tensors)} tensors compared: "
          f"{'EQUAL' if bad == 0 else f'{bad} difference(s)'}" + (f" ({ulps} element(s) within 1 ulp)" if ulps else ""))
    sys.exit(0 if bad == 0 else 1)


if __name__ == "__main__":
    main()
