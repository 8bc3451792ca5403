"""Paged blocks and the prefix cache: allocation, reference counts, LRU eviction."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.serve.block_manager import BlockManager


def test_allocate_release_roundtrip():
    bm = BlockManager(10, 16)
    a = bm.allocate(4)
    assert len(a) == 4 and bm.used_blocks == 4 and bm.free_blocks == 6
    assert bm.allocate(7) is None and bm.used_blocks == 4  # all or nothing
    bm.release(a)
    assert bm.used_blocks == 0
    bm.check()


def test_prefix_hits_share_blocks_and_lru_evicts_oldest():
    bm = BlockManager(4, 16)
    a = bm.allocate(2)
    bm.register(a[0], 111)
    bm.register(a[1], 222)
    bm.release(a)  # cached, evictable
    assert bm.free_blocks == 4
    hits = bm.lookup([111, 222, 333])
    assert hits == a and bm.used_blocks == 2
    bm.touch()  # admitted
    bm.release(hits)
    # fill the cache: the never-cached blocks go first, then the least recently freed
    x = bm.allocate(2)
    assert set(x).isdisjoint(a)
    y = bm.allocate(1)
    assert y[0] == a[1]  # released tail-first: block a[1] entered the LRU first
    assert bm.lookup([111]) == [a[0]]  # a[0] still cached
    bm.touch()
    assert bm.lookup([222]) == []  # evicted with its hash
    bm.check()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6)), min_size=1, max_size=80))
def test_random_operations_keep_invariants(ops):
    bm = BlockManager(20, 4)
    held: list[list[int]] = []
    h = 0
    for kind, n in ops:
        if kind == 0:
            got = bm.allocate(n)
            if got is not None:
                for b in got:
                    h += 1
                    bm.register(b, h % 7)  # hash collisions across blocks are allowed
                held.append(got)
        elif kind == 1 and held:
            bm.release(held.pop(n % len(held)))
        else:
            hits = bm.lookup([n % 7, (n + 1) % 7])
            if hits and n % 2:
                bm.touch()
                held.append(hits)
            else:
                bm.unlookup(hits)
        assert 0 <= bm.used_blocks <= bm.num_blocks
        bm.check()
    for blocks in held:
        bm.release(blocks)
    assert bm.used_blocks == 0
    bm.check()


def test_a_lookup_that_is_not_admitted_leaves_the_lru_order():
    """vLLM V1 touches a request's cached blocks only once its new blocks fit
    (``KVCacheManager.allocate_slots``): a request that finds its prefix but cannot start must
    not make that prefix the most recently used, or it outlives blocks freed after it."""
    bm = BlockManager(3, 16)
    a = bm.allocate(1)
    bm.register(a[0], 111)
    b = bm.allocate(1)
    bm.register(b[0], 222)
    bm.release(a)  # a freed first: least recently used
    bm.release(b)
    hits = bm.lookup([111])
    assert hits == a and bm.free_blocks == 2
    assert bm.allocate(3) is None  # the pinned block cannot be taken
    bm.unlookup(hits)  # not admitted
    bm.check()
    assert bm.free_blocks == 3
    assert bm.allocate(2)[1] == a[0]  # the never-cached block, then a: still the oldest
    assert bm.lookup([111]) == [] and bm.lookup([222]) == b


def test_an_admitted_lookup_refreshes_and_an_allocation_skips_pinned_blocks():
    bm = BlockManager(3, 16)
    blocks = bm.allocate(3)
    for i, blk in enumerate(blocks):
        bm.register(blk, 100 + i)
    bm.release(blocks)  # LRU order: blocks[2], blocks[1], blocks[0]
    assert bm.lookup([102]) == [blocks[2]]
    got = bm.allocate(1)  # passes over the pinned oldest block
    assert got == [blocks[1]]
    bm.touch()
    bm.release([blocks[2]])  # admitted, run, freed: now the most recent
    bm.release(got)  # evicted, so its hash is gone: a never-cached free block again
    bm.check()
    assert bm.allocate(2) == [blocks[1], blocks[0]]  # free first, then the oldest cached
    assert bm.lookup([102]) == [blocks[2]]


def test_a_huge_cache_costs_only_the_blocks_used():
    # 10^9 blocks of bookkeeping up front would be gigabytes (10^4 replicas of an H100's ~3*10^4
    # blocks ran out of memory); blocks are numbered as first taken instead
    bm = BlockManager(10**9, 16)
    assert bm.free_blocks == 10**9 and bm.used_blocks == 0
    a = bm.allocate(3)
    assert a == [0, 1, 2]  # never-used blocks in order, as from a full free list
    bm.release(a)  # tail first: 2, 1, 0 back on the free stack
    assert bm.allocate(2) == [0, 1]  # the released blocks first, last released first
    assert bm.allocate(2) == [2, 3]  # then the next never-used one
    assert bm.used_blocks == 4 and len(bm._ref) == 4
    bm.check()


@given(st.lists(st.integers(1, 6), min_size=1, max_size=30))
@settings(max_examples=60, deadline=None)
def test_allocation_runs_dry_exactly_at_capacity(sizes):
    # however allocations and releases interleave, a cache of N blocks hands out N and no more
    bm = BlockManager(12, 16)
    held: list[list[int]] = []
    for i, n in enumerate(sizes):
        got = bm.allocate(n)
        if got is None:
            assert n > bm.free_blocks
        else:
            held.append(got)
        if i % 3 == 2 and held:
            bm.release(held.pop(0))
        taken = [b for h in held for b in h]
        assert len(set(taken)) == len(taken) and all(0 <= b < 12 for b in taken)
        assert bm.used_blocks == len(taken) and bm.free_blocks == 12 - len(taken)
    bm.check()
