"""Paged KV cache with prefix caching (vLLM's block manager, Kwon et al. SOSP'23 §4.2).

The cache is ``num_blocks`` blocks of ``block_size`` tokens. A request holds a list of blocks;
a full block gets a hash chained to its predecessor's (hash of (parent hash, block content)),
as in vLLM's automatic prefix caching (vLLM docs, "Automatic Prefix Caching", design: hash of
the prefix tokens up to and including the block). A new request reuses the cached blocks of its
longest cached prefix. Blocks whose reference count falls to zero stay cached and evictable;
allocation takes never-cached free blocks first, then evicts the least recently freed (LRU).

A lookup takes its cached blocks only when the request is admitted (`BlockManager.touch`): a
request that finds its prefix but cannot start gives the blocks back where they were in the LRU
order (`BlockManager.unlookup`). vLLM V1's ``KVCacheManager.allocate_slots`` returns before it
touches the computed blocks when the new ones do not fit, so a request waiting on memory does not
keep its prefix fresh by being looked up at every step.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockManager:
    """Block allocation, reference counts, the prefix-hash table and its LRU of free blocks."""

    __slots__ = ("block_size", "num_blocks", "_free", "_ref", "_hash_of", "_table", "_lru",
                 "_pinned", "enable_prefix")  # fmt: skip

    def __init__(self, num_blocks: int, block_size: int, enable_prefix: bool = True) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        # Blocks are numbered as they are first taken: ``_ref`` and ``_hash_of`` grow by one
        # entry per block ever used, and ``_free`` holds released blocks that carry no hash, so
        # a cache of a million blocks (or ten thousand replicas of one) costs memory only for
        # the blocks a run touches. Block ``len(_ref)`` is the next never-used one.
        self._free: list[int] = []
        self._ref: list[int] = []
        self._hash_of: list[int | None] = []
        self._table: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._pinned: list[int] = []
        """Evictable blocks the pending lookup found: referenced, but left in place in the LRU
        order until `touch` (admitted) or `unlookup` (not admitted)."""
        self.enable_prefix = enable_prefix

    # --- capacity ---------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Blocks that an allocation can take: never-used, released uncached, and evictable
        cached."""
        return (
            self.num_blocks - len(self._ref) + len(self._free) + len(self._lru) - len(self._pinned)
        )

    @property
    def used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_blocks - self.free_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # --- allocation -------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (reference count 1), or None (and nothing taken) if short."""
        if n <= 0:
            return []
        if n > self.free_blocks:
            return None
        out: list[int] = []
        free, ref, hash_of = self._free, self._ref, self._hash_of
        fresh = min(n - min(n, len(free)), self.num_blocks - len(ref))
        take = n - min(n, len(free)) - fresh
        evict: list[int] = []
        if take:  # least recently freed first, past the pending lookup's blocks
            for b in self._lru:
                if ref[b] == 0:
                    evict.append(b)
                    if len(evict) == take:
                        break
        for i in range(n):
            if free:
                b = free.pop()
            elif fresh:
                fresh -= 1
                b = len(ref)
                ref.append(0)
                hash_of.append(None)
            else:
                b = evict[i - (n - take)]
                del self._lru[b]
                h = hash_of[b]
                if h is not None and self._table.get(h) == b:
                    del self._table[h]
                hash_of[b] = None
            ref[b] = 1
            out.append(b)
        return out

    def release(self, blocks: list[int]) -> None:
        """Drop one reference to each block, tail first (so a sequence's last blocks are the
        first evicted, as vLLM frees them)."""
        ref, lru = self._ref, self._lru
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                if self._hash_of[b] is not None:
                    lru[b] = None
                else:
                    self._free.append(b)

    # --- prefix cache -------------------------------------------------------------------------
    def register(self, block: int, h: int) -> None:
        """Record that ``block`` holds the full block whose chained hash is ``h``."""
        if not self.enable_prefix:
            return
        if h not in self._table:
            self._table[h] = block
            self._hash_of[block] = h

    def lookup(self, hashes: list[int]) -> list[int]:
        """The cached blocks of the longest prefix of ``hashes``, each referenced once more.
        Those that were evictable stay in their LRU place, pinned, until `touch` or
        `unlookup` settles the lookup (one lookup pending at a time)."""
        out: list[int] = []
        if not self.enable_prefix:
            return out
        assert not self._pinned, "a lookup is pending"
        table, ref = self._table, self._ref
        for h in hashes:
            b = table.get(h)
            if b is None:
                break
            if ref[b] == 0:
                self._pinned.append(b)
            ref[b] += 1
            out.append(b)
        return out

    def touch(self) -> None:
        """The pending lookup's request was admitted: its evictable blocks leave the LRU."""
        for b in self._pinned:
            del self._lru[b]
        self._pinned.clear()

    def unlookup(self, blocks: list[int]) -> None:
        """The pending lookup's request, holding the ``blocks`` it found, was not admitted: drop
        their references, leaving the evictable ones the lookup found where they were in the
        LRU order (not refreshed, as `release` would); any other block is released."""
        ref, lru = self._ref, self._lru
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0 and b not in lru:  # not found by the lookup: released as usual
                if self._hash_of[b] is not None:
                    lru[b] = None
                else:
                    self._free.append(b)
        self._pinned.clear()

    def check(self) -> None:
        """Invariants (for tests): every block ever used is exactly one of free, evictable or
        referenced; the rest have never been used."""
        free = set(self._free)
        lru = set(self._lru)
        assert not free & lru
        assert not self._pinned, "a lookup is pending"
        assert len(free) == len(self._free)
        assert len(self._ref) == len(self._hash_of) <= self.num_blocks
        for b in range(len(self._ref)):
            r = self._ref[b]
            assert r >= 0
            assert (r == 0) == (b in free or b in lru), b
        for h, b in self._table.items():
            assert self._hash_of[b] == h
