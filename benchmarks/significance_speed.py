"""The significance table's randomisation test and paired bootstrap beside SciPy's, in one run (not a test).

Per-query nDCG@10 of two methods over ``--queries`` queries (synthetic, paired); ours is
``miracl_eval.evaluation.significance.compare`` (sign-flip test and paired bootstrap, 10,000
replicates each by default); the reference is ``scipy.stats.permutation_test`` on the paired
differences (``permutation_type="samples"``, the same sign-flip null) and ``scipy.stats.bootstrap``
(paired, percentile) with the same numbers of replicates. Prints CPU seconds of each side (best of
``--rounds``), the ratio ours / SciPy, and both p-values and intervals (Monte-Carlo, so they agree to
within sampling error only).

    python benchmarks/significance_speed.py                   # 3,000 queries (about MIRACL's largest dev set)
    python benchmarks/significance_speed.py --queries 300 --rounds 1
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy import stats

from miracl_eval.evaluation import significance


def _best(fn: Callable[[], object], rounds: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(rounds):
        start = time.process_time()  # CPU time: the figure does not move with other jobs on the machine
        out = fn()
        best = min(best, time.process_time() - start)
    return best, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--replicates", type=int, default=significance.N_PERMUTATIONS)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(1)
    a = rng.random(args.queries)
    b = np.clip(a + rng.normal(-0.01, 0.1, args.queries), 0, 1)
    r = args.replicates

    def ours() -> significance.PairResult:
        return significance.compare(a, b, "bench", n_permutations=r, n_bootstrap=r)

    def scipy_side() -> tuple[float, tuple[float, float]]:
        d = a - b
        test = stats.permutation_test(
            (d,), np.mean, permutation_type="samples", n_resamples=r, vectorized=True, random_state=2
        )
        boot = stats.bootstrap(
            (a, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis), paired=True, vectorized=True,
            n_resamples=r, method="percentile", random_state=3,
        )  # fmt: skip
        return float(test.pvalue), (float(boot.confidence_interval.low), float(boot.confidence_interval.high))

    t_ours, row = _best(ours, args.rounds)
    t_ref, (p_ref, ci_ref) = _best(scipy_side, args.rounds)  # type: ignore[misc]
    assert isinstance(row, significance.PairResult)
    print(f"{args.queries} queries, {r} permutations and {r} bootstrap samples (CPU seconds, best of {args.rounds})")
    print(f"{'side':<8} {'seconds':>8} {'p-value':>9}  diff CI")
    print(f"{'ours':<8} {t_ours:8.3f} {row.p_value:9.4f}  [{row.ci_low:.4f}, {row.ci_high:.4f}]")
    print(f"{'scipy':<8} {t_ref:8.3f} {p_ref:9.4f}  [{ci_ref[0]:.4f}, {ci_ref[1]:.4f}]")
    print(f"ratio ours / scipy: {t_ours / t_ref:.2f}")


if __name__ == "__main__":
    main()
