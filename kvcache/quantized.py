"""Asymmetric uniform quantization to b bits, and the packing of b-bit codes into bytes.

One slice of numbers (a channel over a group of tokens, or a token's d channels) is kept as
b-bit codes and two floats, its offset (the minimum) and its step (the scale)::

    offset = min(x),    scale = (max(x) - min(x)) / (2**b - 1)
    code   = clip(round((x - offset) / scale), 0, 2**b - 1)          x ~ code * scale + offset

so every number is within half a step of its decoded value, |x - (code scale + offset)| <=
scale / 2; a constant slice has scale 0, codes 0, and decodes exactly.  Which slice shares a
scale is the choice that matters on a real model (chapter 13): keys are quantized per channel
(statistics over a group of tokens: an outlier channel gets its own range), values per token.

``quantize_kv`` and ``dequantize_kv`` are the two functions every quantized cache calls, in the
form of the course's exercise of that name; ``pack_codes`` puts 8 / b codes in each byte (two
4-bit or four 2-bit codes), so that the bytes are really saved, and ``unpack_codes`` takes them
out again.  ``quantize_channels`` and ``quantize_tokens`` apply the quantizer to many slices at
once, in the two layouts a cache keeps.
"""
from __future__ import annotations

import numpy as np

__all__ = ["quantize_kv", "dequantize_kv", "pack_codes", "unpack_codes", "packed_width",
           "quantize_channels", "dequantize_channels", "quantize_tokens", "dequantize_tokens"]


def quantize_kv(x, bits, axis):
    """b-bit codes of x (T, d) with an offset and a scale per slice: ``axis=0`` takes each
    channel's statistics over the T tokens (one scale per channel, keys), ``axis=1`` each token's
    over its d channels (one scale per token, values).

    offset = min, scale = (max - min) / (2**bits - 1), codes = clip(round((x - offset) / scale),
    0, 2**bits - 1) as uint8; a constant slice gets scale 0 and codes 0.  ``scale`` and ``offset``
    keep the reduced axis (length 1), so they broadcast against x.  x is not modified.
    """
    x = np.asarray(x, dtype=np.float64)
    top = 2 ** int(bits) - 1
    offset = x.min(axis=axis, keepdims=True)
    scale = (x.max(axis=axis, keepdims=True) - offset) / top
    step = np.where(scale > 0, scale, 1.0)                 # a constant slice: x - offset = 0 anyway
    codes = np.clip(np.round((x - offset) / step), 0, top).astype(np.uint8)
    return codes, scale, offset


def dequantize_kv(codes, scale, offset):
    """codes * scale + offset: the numbers b-bit codes stand for (every shape that broadcasts)."""
    return codes * scale + offset


def packed_width(d: int, bits: int) -> int:
    """Bytes that d codes of ``bits`` bits take: d bits / 8 (d bits must be a whole number of bytes)."""
    if 8 % bits or (d * bits) % 8:
        raise ValueError(f"{d} codes of {bits} bits do not fill whole bytes (bits must divide 8, "
                         f"d * bits be a multiple of 8)")
    return d * bits // 8


def _shifts(bits: int) -> np.ndarray:
    return (np.arange(8 // bits, dtype=np.uint8) * bits).astype(np.uint8)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """(..., d) codes below 2**bits -> (..., d bits / 8) uint8: code j of a byte in bits
    j b .. j b + b - 1 (the first code in the low bits)."""
    per = 8 // bits
    packed_width(codes.shape[-1], bits)
    grouped = codes.astype(np.uint8).reshape(codes.shape[:-1] + (codes.shape[-1] // per, per))
    return np.bitwise_or.reduce(grouped << _shifts(bits), axis=-1).astype(np.uint8)


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """``pack_codes`` undone: (..., w) uint8 -> (..., w 8 / bits) codes, uint8."""
    per = 8 // bits
    mask = np.uint8(2 ** bits - 1)
    codes = (packed[..., None] >> _shifts(bits)) & mask
    return codes.reshape(packed.shape[:-1] + (packed.shape[-1] * per,))


def quantize_channels(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys per channel: x (..., g, d), each channel's statistics over the g tokens of its group.
    Returns packed codes (..., g, d bits / 8), scale and offset (..., d) float32.

    Every (group, channel) is one column of a (g, M) matrix, quantized with ``quantize_kv(.., 0)``
    in one call."""
    lead, (g, d) = x.shape[:-2], x.shape[-2:]
    columns = np.moveaxis(x.reshape((-1, g, d)), 1, 0).reshape(g, -1)          # (g, M)
    codes, scale, offset = quantize_kv(columns, bits, 0)
    codes = np.moveaxis(np.asarray(codes, np.uint8).reshape(g, -1, d), 0, 1).reshape(x.shape)
    shape = lead + (d,)
    return (pack_codes(codes, bits), np.asarray(scale, np.float32).reshape(shape),
            np.asarray(offset, np.float32).reshape(shape))


def dequantize_channels(packed: np.ndarray, scale: np.ndarray, offset: np.ndarray, bits: int, dtype) -> np.ndarray:
    """``quantize_channels`` undone: (..., g, w) codes and (..., d) scales -> (..., g, d) ``dtype``."""
    codes = unpack_codes(packed, bits)
    return np.asarray(dequantize_kv(codes, scale[..., None, :], offset[..., None, :]), dtype)


def quantize_tokens(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values per token: x (..., d), each row's statistics over its d channels.  Returns packed
    codes (..., d bits / 8), scale and offset (...,) float32."""
    rows = x.reshape(-1, x.shape[-1])
    codes, scale, offset = quantize_kv(rows, bits, 1)
    codes = np.asarray(codes, np.uint8).reshape(x.shape)
    return (pack_codes(codes, bits), np.asarray(scale, np.float32).reshape(x.shape[:-1]),
            np.asarray(offset, np.float32).reshape(x.shape[:-1]))


def dequantize_tokens(packed: np.ndarray, scale: np.ndarray, offset: np.ndarray, bits: int, dtype) -> np.ndarray:
    """``quantize_tokens`` undone: (..., w) codes and (...,) scales -> (..., d) ``dtype``."""
    codes = unpack_codes(packed, bits)
    return np.asarray(dequantize_kv(codes, scale[..., None], offset[..., None]), dtype)
