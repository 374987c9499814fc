"""lessons.quantized_timing: the positions chosen from the memory a machine has, caches filled
layer by layer with their own buffers, and the step measured on a small shape (its structure and
its bytes, never its times)."""
import numpy as np

from lessons.quantized_timing import StepTime, filled_cache, measure_step, positions_for


def test_positions_follow_the_free_memory():
    L, G, d = 30, 3, 64
    f32 = 2 * L * G * d * 4                                   # bytes of float32 cache a position
    assert positions_for(None, L, G, d) == 4096               # unknown: what the page asks for
    assert positions_for(4 * f32 * 4096, L, G, d) == 4096     # a quarter of the memory is enough
    assert positions_for(4 * f32 * 4096 - 1, L, G, d) == 2048
    assert positions_for(4 * f32 * 1000, L, G, d) == 512
    assert positions_for(0, L, G, d) == 256                   # never below the floor


def test_every_layer_of_a_filled_cache_has_its_own_buffers():
    kv = filled_cache("int4", 3, 2, 8, 64, 5)
    assert len(kv) == 3 and list(kv.lengths) == [64]
    assert np.array_equal(kv[0].keys(0), kv[2].keys(0))
    kv[1].k[...] = 0                                          # one layer's codes overwritten ...
    assert not np.array_equal(kv[0].keys(0), kv[1].keys(0))    # ... leave the others' alone
    f32 = filled_cache("float32", 3, 2, 8, 64, 5)
    assert f32.used_bytes == 3 * 2 * 2 * 64 * 8 * 4


def test_the_step_measured_on_a_small_shape():
    times = measure_step(layers=2, kv_heads=2, heads=4, head_dim=8, positions=64, dtypes=("float32", "int4", "int2"),
                         rounds=2, steps=1)
    assert [t.dtype for t in times] == ["float32", "int4", "int2"] and all(isinstance(t, StepTime) for t in times)
    f32, int4, int2 = times
    assert f32.bytes_kept == 2 * 2 * 2 * 64 * 8 * 4
    # int4: codes 64 x 8 / 2 bytes a head for keys and for values, the keys' scale and offset per
    # channel of each group of 32, the values' per token: float32 each; 64 positions, no window left
    assert int4.bytes_kept == 2 * 2 * (2 * 64 * 8 // 2 + 2 * 8 * 8 + 64 * 8)
    assert int2.bytes_kept < int4.bytes_kept < f32.bytes_kept
    assert all(t.step_seconds > 0 for t in times) and f32.unpack_seconds == 0
    assert int4.unpack_seconds > 0 and int2.unpack_seconds > 0
