#!/usr/bin/env python3
"""fixture_close.py OLD NEW: exit 0 when two regenerated fixtures hold the same numbers up to the last bits a
different CPU's float kernels change (JSON: every number within 1e-12 relative or 1e-14 absolute; safetensors: the same names,
dtypes and shapes, float64 within 1e-12 relative or 1e-14 absolute (a sum that cancels to about 0), float32 within 4 ulp or 1e-14, everything else byte-equal), else exit 1
with the first difference. make_refs.sh uses it for fixtures whose bytes changed."""
import json, math, struct, sys


def close(a, b, path="$"):
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        if type(a) != type(b):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if isinstance(a, dict):
            if a.keys() != b.keys():
                return f"{path}: keys differ"
            for k in a:
                r = close(a[k], b[k], f"{path}.{k}")
                if r:
                    return r
            return None
        if isinstance(a, list):
            if len(a) != len(b):
                return f"{path}: lengths {len(a)} vs {len(b)}"
            for i, (x, y) in enumerate(zip(a, b)):
                r = close(x, y, f"{path}[{i}]")
                if r:
                    return r
            return None
        return None if a == b else f"{path}: {a!r} vs {b!r}"
    if math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-14) or (math.isnan(a) and math.isnan(b)):
        return None
    return f"{path}: {a!r} vs {b!r}"


def tensors(blob):
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    return head, blob[8 + n:]


def st_close(a, b):
    ha, da = tensors(a)
    hb, db = tensors(b)
    if ha.keys() != hb.keys():
        return "tensor names differ"
    for k, ia in ha.items():
        if k == "__metadata__":
            r = close(ia, hb[k], k)
            if r:
                return r
            continue
        ib = hb[k]
        if ia["dtype"] != ib["dtype"] or ia["shape"] != ib["shape"]:
            return f"{k}: dtype or shape differs"
        xa = da[ia["data_offsets"][0]:ia["data_offsets"][1]]
        xb = db[ib["data_offsets"][0]:ib["data_offsets"][1]]
        if xa == xb:
            continue
        if ia["dtype"] == "F64":
            for i, (x, y) in enumerate(zip(struct.iter_unpack("<d", xa), struct.iter_unpack("<d", xb))):
                if not math.isclose(x[0], y[0], rel_tol=1e-12, abs_tol=1e-14):
                    return f"{k}[{i}]: {x[0]!r} vs {y[0]!r}"
        elif ia["dtype"] == "F32":
            for i, (x, y) in enumerate(zip(struct.iter_unpack("<i", xa), struct.iter_unpack("<i", xb))):
                # ulps between two floats of the same sign: their bit patterns' distance
                if (x[0] < 0) != (y[0] < 0) or abs(x[0] - y[0]) > 4:
                    fx, fy = struct.unpack("<f", struct.pack("<i", x[0]))[0], struct.unpack("<f", struct.pack("<i", y[0]))[0]
                    if not abs(fx - fy) <= 1e-14:
                        return f"{k}[{i}]: {fx!r} vs {fy!r}"
        else:
            return f"{k}: {ia['dtype']} bytes differ"
    return None


def main():
    old, new = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
    if sys.argv[2].endswith(".safetensors"):
        r = st_close(old, new)
    else:
        try:
            r = close(json.loads(old), json.loads(new))
        except ValueError:
            r = None if old == new else "bytes differ (not JSON)"
    if r:
        print(f"{sys.argv[2]}: {r}")
        sys.exit(1)


if __name__ == "__main__":
    main()
