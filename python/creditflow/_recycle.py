"""Memory for trainer batches, reused once nothing references it.

A padded batch is megabytes (64 search-QA samples: 2.7 MB in six arrays; 64 samples of 32k
tokens: 64 MB). Taken fresh for every batch, glibc serves each array with mmap and the kernel
hands out zeroed pages one fault at a time (about 570 faults per search-QA batch), which cost
as much as everything else that SampleStream -> to_torch does per sample
(docs/performance.md, "The trainer's end").

ArrayPool keeps the flat buffers of earlier batches and hands one out again only when its
CPython reference count says that nothing else holds it: no array, view, torch tensor
(torch.from_numpy keeps its array alive), memoryview or pickle-in-progress of it. A batch a
trainer still holds, or any part of one, is never written to.
"""

import sys
import threading

import numpy as np

__all__ = ["ArrayPool"]


def _size_class(n):
    """n rounded up to one of 8 steps per power of two, so that a buffer also fits batches
    up to 12% longer than the one it was made for."""
    if n <= 1 << 16:
        return 1 << 16
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


class ArrayPool:
    """Arrays backed by reused flat buffers. At most `max_buffers` buffers and `max_bytes`
    bytes are kept (the least recently used dropped first, free ones before ones in use):
    what the pool holds once a trainer has dropped its batches. The defaults keep two padded
    batches of 64 samples of 128k tokens, or 24 arrays of any smaller batches."""

    def __init__(self, max_buffers=24, max_bytes=512 << 20):
        self.max_buffers, self.max_bytes = max_buffers, max_bytes
        self._bufs = []  # flat uint8 arrays, least recently handed out first
        self._lock = threading.Lock()
        self.reused = self.allocated = 0

    def _free(self, i):
        # references while free: the list's, getrefcount's argument (_FREE counts them the
        # same way, once, below)
        return sys.getrefcount(self._bufs[i]) <= _FREE

    def empty(self, shape, dtype):
        """A new array of `shape` and `dtype`, uninitialized (as np.empty): what an earlier
        batch left there, or nothing yet written."""
        dtype = np.dtype(dtype)
        n = dtype.itemsize
        for d in shape:
            n *= int(d)
        if n == 0:
            return np.empty(shape, dtype)
        with self._lock:
            best = None
            for i in range(len(self._bufs)):
                size = self._bufs[i].nbytes
                if size >= n and (best is None or size < self._bufs[best].nbytes) and self._free(i):
                    best = i
            if best is not None:  # most recently used now
                buf = self._bufs.pop(best)
                self._bufs.append(buf)
                self.reused += 1
            else:
                buf = np.empty(_size_class(n), np.uint8)
                self._bufs.append(buf)
                self.allocated += 1
                self._bound()
        return buf[:n].view(dtype).reshape(shape)

    def _bound(self):
        """Drops buffers, least recently used first and free ones before ones in use, until
        the pool is within its bounds (the newest always stays). An array in use that leaves
        the pool stays the caller's; it is just not reused."""
        held = sum(b.nbytes for b in self._bufs)
        while len(self._bufs) > 1 and (len(self._bufs) > self.max_buffers or held > self.max_bytes):
            i = next((i for i in range(len(self._bufs) - 1) if self._free(i)), 0)
            held -= self._bufs[i].nbytes
            del self._bufs[i]


def _free_refs():
    p = ArrayPool()
    p._bufs.append(np.empty(1, np.uint8))
    return sys.getrefcount(p._bufs[0])


_FREE = _free_refs()
