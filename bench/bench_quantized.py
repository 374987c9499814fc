"""bench_quantized: what an int4 or int2 cache costs a decode step, against float32, in one run.

``python -m bench quantized`` (or ``make bench``): the step chapter 13 times
(``lessons.quantized_timing.measure_step``), at 4,096 cached positions in every one of
SmolLM2's 30 layers (3 key/value heads of 64, 9 query heads), in a float32, an int4 and an int2
cache: one decode step's attention in every layer (write the new key and value, then attend),
fastest of 5 rounds with the formats taking turns, the unpacking of the whole cache timed alone,
and the bytes each cache keeps, which is what a step reads.

The bytes fall 5.8 times from float32 to int4, but numpy cannot attend over packed codes: every
step unpacks them (shifts and masks), multiplies by the scales and adds the offsets, writing a
float32 copy that attention then reads, a pass over all 2 L G T d numbers on top of the one
attention makes.  On a CPU the quantized step is slower, not faster; a GPU kernel that
dequantizes in registers as it reads (KIVI's) is what turns the saved bytes into time.  The
machine is shared: its load is printed; nothing is asserted.
"""
from __future__ import annotations

L, G, H, D, T = 30, 3, 9, 64, 4096
ROUNDS = 5


def main() -> int:
    from lessons.quantized_timing import load_average, measure_step

    print(f"load average {load_average():.2f}")
    times = measure_step(L, G, H, D, T, dtypes=("float32", "int4", "int2"), rounds=ROUNDS)
    base = times[0]
    print(f"{T:,} cached positions in each of {L} layers ({G} key/value heads of {D}, {H} query heads)")
    for t in times:
        unpack = (f"   unpacking {t.unpack_seconds * 1e3:7.1f} ms ({t.unpack_seconds / t.step_seconds:4.0%} of the step, "
                  f"{t.unpack_seconds / base.step_seconds:4.1f}x float32's whole step)" if t.unpack_seconds else "")
        print(f"{t.dtype:8s} {t.bytes_kept:>12,} bytes kept ({base.bytes_kept / t.bytes_kept:4.1f}x fewer)   "
              f"decode step {t.step_seconds * 1e3:7.1f} ms ({t.step_seconds / base.step_seconds:4.1f}x float32's time)"
              + unpack)
    print(f"load average {load_average():.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
