"""The engine's argument checks (``kvcache.validate``), and the rule that the scheduler and the
searches use the paged cache through its public methods only."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from kvcache import validate
from kvcache.paged import OutOfBlocks, PagedKVCache

ROOT = Path(__file__).resolve().parents[2]


def test_a_whole_number_is_an_integer_and_never_a_bool():
    assert validate.whole(3, "n", 1) == 3 and type(validate.whole(np.int32(3), "n", 1)) is int
    assert validate.whole(0, "n", 0) == 0
    for bad in (True, False, np.bool_(True), 2.0, "2", None, 0):
        with pytest.raises(ValueError, match=r"n must be an integer >= 1, got"):
            validate.whole(bad, "n", 1)
    assert validate.is_number(0.5) and validate.is_number(np.float32(1)) and validate.is_number(2)
    assert not validate.is_number(True) and not validate.is_number("1")
    assert validate.flag(False, "preempt") is False
    with pytest.raises(ValueError, match="preempt must be True or False, got 1"):
        validate.flag(1, "preempt")


def test_token_ids_name_the_first_id_outside_the_vocabulary_and_its_position():
    ids = validate.token_ids([3, 0, 9], 10)
    assert ids.dtype == np.int64 and ids.tolist() == [3, 0, 9]
    with pytest.raises(ValueError, match=r"prompt 2: token id 10 at position 1 is outside the vocabulary \(0 .. 9\)"):
        validate.token_ids([1, 10, -1], 10, "prompt 2")
    with pytest.raises(ValueError, match="token id -1 at position 0"):
        validate.token_ids(np.array([-1, 12]), 10)
    for bad in ([[1, 2]], [1.5], "ab"):
        with pytest.raises(ValueError, match="1-d sequence of integers"):
            validate.token_ids(bad, 10)
    assert validate.token_ids([], 10).shape == (0,)


def test_eos_is_none_one_id_or_a_non_empty_list():
    assert validate.eos_ids(None, 10).shape == (0,)
    assert validate.eos_ids(4, 10).tolist() == [4] and validate.eos_ids([4, 2], 10).tolist() == [4, 2]
    assert validate.eos_ids(np.int64(4), 10).tolist() == [4]
    with pytest.raises(ValueError, match="request 3: eos_token_id is an empty list"):
        validate.eos_ids([], 10, "request 3: eos_token_id")
    with pytest.raises(ValueError, match="must be a token id or a list of them"):
        validate.eos_ids(1.5, 10)
    with pytest.raises(ValueError, match="token id 10 at position 1"):
        validate.eos_ids([1, 10], 10)


def test_step_counts_and_indices():
    assert validate.step_counts([2, 1], 2).tolist() == [2, 1]
    for bad in ([2], [0, 1], [1.0, 1.0], [[1, 1]]):
        with pytest.raises(ValueError, match=r"one count >= 1 per sequence \(2\)"):
            validate.step_counts(bad, 2)
    assert validate.index([0, 2, 2], 3, "row").tolist() == [0, 2, 2]
    with pytest.raises(ValueError, match="beam index 3 is out of range: the cache holds 3 sequences"):
        validate.index([0, 3], 3, "beam index")


def test_the_paged_cache_hands_out_blocks_and_rows_through_its_own_methods():
    kv = PagedKVCache(1, 0, 2, 4, 40, block_size=4, num_blocks=6)
    row = kv.add_sequence()
    kv.reserve_blocks(row, 2)
    assert len(kv.block_table(row)) == 2 and kv.num_free == 4 and kv.num_used == 2
    with pytest.raises(OutOfBlocks, match="5 blocks asked for, 4 free"):
        kv.reserve_blocks(row, 5)
    with pytest.raises(ValueError, match="past max_len"):
        kv.reserve_blocks(row, 9)                       # 11 blocks of 4 > 40 positions
    assert kv.num_free == 4 and len(kv.block_table(row)) == 2          # nothing taken
    other = kv.add_sequence(kv.share_blocks(kv.block_table(row)[:1]), 0)
    assert kv.block_tables == [kv.block_table(row), kv.block_table(row)[:1]]
    kv.rearrange([1, 1, 0])
    assert kv.batch == 3 and kv.num_used == 2
    kv.check()
    kv.rearrange([])
    assert kv.batch == 0 and kv.num_free == 6 and len(kv.free_blocks()) == 6
    with pytest.raises(ValueError, match="row 0 is out of range"):
        kv.rearrange([0])
    assert other == 1


PRIVATE_OF_THE_CACHE = {"tables", "allocator"}


def foreign_attributes(path: Path) -> list[str]:
    """Attributes read on anything but ``self`` that are a cache's internals: an underscored name,
    or the paged cache's tables and allocator."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            name = node.attr
            if (name.startswith("_") and not name.startswith("__")) or name in PRIVATE_OF_THE_CACHE:
                found.append(f"{path.name}:{node.lineno} .{name}")
    return found


def test_the_scheduler_and_the_searches_touch_no_internals_of_the_cache():
    for module in ("serving.py", "generate.py", "model.py"):
        assert foreign_attributes(ROOT / "kvcache" / module) == []
