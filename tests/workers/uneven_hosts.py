"""Allreduces of every size class (the fast path's, fused, alone) checked
against numpy, and the same bits on every rank: ``python uneven_hosts.py``
on ranks laid out on hosts of different sizes (tests/test_uneven_hosts.py).
Prints ``<rank>: uneven ok``."""

import numpy as np

import ring_strategy as rs


def main() -> None:
    rs.init()
    n, me = rs.size(), rs.rank()
    for count in (1, 7, 1000, 100_000, 1_000_000):
        for step in range(3):
            x = np.random.default_rng([me, count, step]).standard_normal(count).astype(np.float32)
            got = rs.allreduce(x, op=rs.Sum, name=f"u.{count}")
            want = sum(np.random.default_rng([r, count, step]).standard_normal(count).astype(np.float64)
                       for r in range(n))
            assert np.allclose(got, want, rtol=1e-4, atol=1e-4), (me, count)
            firsts = rs.allgather(got[None, :8])
            assert (firsts == firsts[0]).all(), (me, count)  # the same bits on every rank
    print(f"{me}: uneven ok", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
