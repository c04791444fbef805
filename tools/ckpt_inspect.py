#!/usr/bin/env python3
"""Reads an asyncps checkpoint without asyncps: prints every variable's name, dtype, shape and
CRC-32 (zlib's, over the variable's little-endian row-major bytes, shards concatenated).

    ckpt_inspect.py CHECKPOINT_DIR [--slots]

CHECKPOINT_DIR is a ckpt-<step> directory, or a CheckpointManager directory (its newest
checkpoint that has a manifest is read). Every file is checked against the manifest (size,
CRC-32) and read as safetensors (header validated); any problem exits with status 1 and says
which file and what is wrong. Standard library only; with numpy, load() returns numpy arrays.

Output, one line per variable (and per optimizer slot with --slots, named "var:slot"):
    <name>\t<DTYPE>\t[d0, d1, ...]\tcrc32=<8 hex digits>
"""
import json
import os
import struct
import sys
import zlib

try:
    import numpy
except ImportError:  # numpy is optional
    numpy = None

DTYPES = {"F32": ("f", 4), "F64": ("d", 8), "I32": ("i", 4), "I64": ("q", 8), "U8": ("B", 1), "BOOL": ("?", 1)}
NUMPY_DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "u1", "BOOL": "?"}


class CheckpointError(Exception):
    pass


def read_safetensors(path):
    """Returns (header dict without __metadata__, data bytes), validating the layout."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise CheckpointError(f"{path}: truncated ({len(blob)} bytes)")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise CheckpointError(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: header is not JSON: {e}")
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    end = 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = entry["data_offsets"]
        if entry["dtype"] not in DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {entry['dtype']}")
        count = 1
        for d in entry["shape"]:
            count *= d
        if begin != end or stop - begin != count * DTYPES[entry["dtype"]][1]:
            raise CheckpointError(f"{path}: tensor {name!r} at {begin}..{stop} does not tile the data")
        end = stop
    if end != len(data):
        raise CheckpointError(f"{path}: tensors end at {end}, data holds {len(data)} bytes")
    return header, data


def resolve(path):
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    steps = []
    for name in os.listdir(path):
        if name.startswith("ckpt-") and name[5:].isdigit() and os.path.exists(os.path.join(path, name, "manifest.json")):
            steps.append((int(name[5:]), name))
    if not steps:
        raise CheckpointError(f"{path}: no checkpoint (no manifest.json)")
    return os.path.join(path, max(steps)[1])


def load_raw(path, slots=False):
    """Returns (manifest, [(name, dtype, shape, bytes)]) for every variable (and slot)."""
    path = resolve(path)
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    files = {}
    for entry in manifest["files"]:
        file_path = os.path.join(path, entry["name"])
        if not os.path.exists(file_path):
            raise CheckpointError(f"{file_path}: missing")
        with open(file_path, "rb") as f:
            blob = f.read()
        if len(blob) != entry["bytes"]:
            raise CheckpointError(f"{file_path}: {len(blob)} bytes, manifest says {entry['bytes']}")
        if zlib.crc32(blob) != entry["crc32"]:
            raise CheckpointError(f"{file_path}: checksum mismatch")
        files[entry["name"]] = read_safetensors(file_path)
    out = []
    for var in manifest["variables"]:
        names = [(var["name"], None, var["dtype"])]
        if slots and var["shards"]:
            names += [(f"{var['name']}:{s}", s, "F32") for s in sorted(var["shards"][0]["slots"])]
        for label, slot, dtype in names:
            parts = []
            for shard in var["shards"]:
                tensor = shard["tensor"] if slot is None else shard["slots"][slot]
                header, data = files[shard["file"]]
                if tensor not in header:
                    raise CheckpointError(f"{shard['file']}: no tensor {tensor!r}")
                begin, stop = header[tensor]["data_offsets"]
                parts.append(data[begin:stop])
            out.append((label, dtype, var["shape"], b"".join(parts)))
    return manifest, out


def load(path, slots=False):
    """{name: array}: numpy arrays when numpy is present, else (dtype, shape, array.array)."""
    import array
    _, tensors = load_raw(path, slots)
    result = {}
    for name, dtype, shape, raw in tensors:
        if numpy is not None:
            result[name] = numpy.frombuffer(raw, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
        else:
            values = array.array(DTYPES[dtype][0] if dtype != "BOOL" else "B")
            values.frombytes(raw)
            if sys.byteorder != "little":
                values.byteswap()
            result[name] = (dtype, shape, values)
    return result


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        manifest, tensors = load_raw(args[0], slots="--slots" in argv)
    except (CheckpointError, OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"step {manifest['step']}")
    for name, dtype, shape, raw in tensors:
        shape_text = "[" + ", ".join(str(d) for d in shape) + "]"
        print(f"{name}\t{dtype}\t{shape_text}\tcrc32={zlib.crc32(raw):08x}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
