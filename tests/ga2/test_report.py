"""python -m ga2: the tables as the published GA-2 chapter lays them out."""
from ga2 import report


def test_report_prints_the_seed_tables(capsys):
    assert report.main([]) == 0
    out = capsys.readouterr().out
    assert " 21 MM dst=2848 A=2832 B=1792 M=1 K=16 N=3 tb=1 lda=16 ldb=16 ldc=4" in out
    assert "32 instructions; the same step without a cache ('recompute') is 28." in out
    assert " 32 cached        38    5251    3024   1866     283   3.04x faster than recompute" in out
    assert " 32 recompute     90   15989   13216   1316    1275" in out
    assert "  MM     24 instructions   3072 cycles  58.5%" in out
    assert "  LD      4 instructions   1820 cycles  34.7%" in out
    assert "total 5249 cycles" in out
    assert "  24    4539      12349   2.72" in out
    assert "cached 124,346 cycles in total, recompute 295,184 cycles (2.37x)" in out
