"""A child's report on the wire: JSON for its structure, safetensors for its tensors.

The child (:mod:`grader.child`) writes one envelope with :func:`encode`; the parent reads it
back with :func:`decode`, the only reader, before :func:`grader.protocol.check_envelope`
checks its fields. The file is a safetensors file: its tensors are ``t0``, ``t1``, ...
and its metadata entry ``envelope`` holds the structure as JSON, where a tensor stands as
``{"tensor": index}``. Neither format can express a shared reference, a cycle or an object
of any class, so a report cannot unfold into more than it weighs and reading it runs no
code. JSON's own values (null, true and false, numbers, strings, arrays) mean themselves;
what JSON lacks is a one-key object:

- ``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}`` (keys: strings or ints, in order),
- ``{"float": "nan" | "inf" | "-inf"}``, ``{"tensor": index}``.

What :func:`decode` returns equals what :func:`grader.child.plain_copy` built: tuples stay
tuples, int keys stay ints, non-finite floats survive, tensors keep dtype and shape (the
zero-size and 0-d ones too) and come back contiguous.
"""
from __future__ import annotations

import json
import json.encoder
import math
import struct

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

MAX_DEPTH = 100  # nesting of the envelope (plain_copy's observations are a few levels deep)
MAX_NODES = 1_000_000  # values in the envelope
MAX_TENSORS = 4096  # tensors of one report
MAX_HEADER_BYTES = 8 * 1024 * 1024  # the structure (and the tensors' table): parsed JSON costs ~20x its bytes
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _refuse_object(value):
    raise TypeError(f"a {type(value).__name__} cannot be reported")


def _json_encoder():
    """A JSON encoder made of what ``json`` holds now (when this module is imported: in the
    grader's forkserver, before any student code exists), not looked up when it runs: code
    that wraps ``json.dumps`` or ``json.JSONEncoder`` later cannot change what a child
    reports (it could drop the names of what it replaced). Compact, non-finite floats
    refused; without json's C accelerator, ``json.dumps`` as it is now."""
    make = getattr(json.encoder, "c_make_encoder", None)  # typeshed does not know json's accelerator
    strings = json.encoder.encode_basestring_ascii
    if make is None:
        return json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode
    join = "".join

    def encode(value) -> str:
        return join(make(None, _refuse_object, strings, None, ":", ",", False, False, False)(value, 0))

    return encode


_encode_json = _json_encoder()


class Malformed(ValueError):
    """A report that is not in the grader's format (what is wrong is the message)."""


class TooLarge(Malformed):
    """A report past one of the reader's bounds (bytes, nesting, values, tensors)."""


def encode(envelope: dict) -> bytes:
    """``envelope`` (plain data only: see :func:`grader.child.plain_copy`) as a report file.

    Raises:
        TypeError: for a value outside the format (a set, an object of some class).
    """
    tensors: dict[str, torch.Tensor] = {}

    def tagged(value):
        if value is None or type(value) in (bool, int, str):
            return value
        if type(value) is float:
            return value if math.isfinite(value) else {"float": "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"}
        if type(value) is list:
            return [tagged(item) for item in value]
        if type(value) is tuple:
            return {"tuple": [tagged(item) for item in value]}
        if type(value) is dict and all(type(key) in (str, int) for key in value):
            return {"dict": [[key, tagged(item)] for key, item in value.items()]}
        if type(value) is torch.Tensor:
            tensors[f"t{len(tensors)}"] = value.detach().cpu().resolve_conj().resolve_neg().contiguous()
            return {"tensor": len(tensors) - 1}
        raise TypeError(f"a {type(value).__name__} cannot be reported")

    structure = _encode_json(tagged(envelope))
    return save_tensors(tensors, metadata={"envelope": structure})


def decode(data: bytes) -> dict:
    """The envelope in ``data`` (a report file, already bounded in bytes by the caller).

    Raises:
        TooLarge: past :data:`MAX_HEADER_BYTES`, :data:`MAX_TENSORS`, :data:`MAX_DEPTH` or
            :data:`MAX_NODES`. Malformed: anything else that is not a report :func:`encode` wrote.
    """
    header = _header(data)
    metadata = header.pop("__metadata__", None)
    if type(metadata) is not dict or type(metadata.get("envelope")) is not str:
        raise Malformed("it has no envelope")
    if len(header) > MAX_TENSORS:
        raise TooLarge(f"it holds {len(header)} tensors (at most {MAX_TENSORS})")
    try:
        tensors = load_tensors(data)
        structure = json.loads(metadata["envelope"], parse_constant=_refuse)
    except RecursionError:
        raise TooLarge(f"it nests deeper than {MAX_DEPTH} levels") from None
    except Malformed:
        raise
    except Exception as error:  # noqa: BLE001 - the library's own errors for a broken file
        raise Malformed(f"unreadable ({type(error).__name__})") from None
    nodes = [0]
    envelope = _untagged(structure, tensors, 0, nodes)
    if type(envelope) is not dict:
        raise Malformed(f"it is a {type(envelope).__name__}, not a mapping")
    return envelope


def _header(data: bytes) -> dict:
    """The safetensors header (the tensors' table and the metadata), bounded before parsing."""
    if len(data) < 8:
        raise Malformed("it is too short")
    (length,) = struct.unpack("<Q", data[:8])
    if 8 + length > len(data):
        raise Malformed("it is cut short")
    if length > MAX_HEADER_BYTES:
        raise TooLarge(f"its structure takes more than {MAX_HEADER_BYTES // (1024 * 1024)} MB")
    try:
        header = json.loads(data[8 : 8 + length], parse_constant=_refuse)
    except RecursionError:
        raise TooLarge(f"it nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:
        raise Malformed(f"its header is not JSON ({error.__class__.__name__})") from None
    if type(header) is not dict:
        raise Malformed("its header is not a mapping")
    return header


def _refuse(constant: str):
    raise Malformed(f"it holds the bare constant {constant} (not JSON)")


def _untagged(value, tensors: dict[str, torch.Tensor], depth: int, nodes: list[int]):
    """``value`` as the Python data it stands for."""
    nodes[0] += 1
    if nodes[0] > MAX_NODES:
        raise TooLarge(f"it holds more than {MAX_NODES} values")
    if depth > MAX_DEPTH:
        raise TooLarge(f"it nests deeper than {MAX_DEPTH} levels")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [_untagged(item, tensors, depth + 1, nodes) for item in value]
    if type(value) is not dict or len(value) != 1:
        raise Malformed("it holds an object that is not one of the format's tagged values")
    ((tag, content),) = value.items()
    if tag == "tuple" and type(content) is list:
        return tuple(_untagged(item, tensors, depth + 1, nodes) for item in content)
    if tag == "dict" and type(content) is list:
        return _dict(content, tensors, depth, nodes)
    if tag == "float" and content in _NON_FINITE:
        return _NON_FINITE[content]
    if tag == "tensor" and type(content) is int and f"t{content}" in tensors:
        return tensors.pop(f"t{content}")  # each tensor once: no two places share one
    raise Malformed(f"it holds a {tag!r} value the format does not know")


def _dict(pairs: list, tensors: dict[str, torch.Tensor], depth: int, nodes: list[int]) -> dict:
    result: dict = {}
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) not in (str, int):
            raise Malformed("it holds a mapping entry that is not a [str or int key, value] pair")
        result[pair[0]] = _untagged(pair[1], tensors, depth + 1, nodes)
    return result
