"""What the labs' checks share."""
from __future__ import annotations

SYNCS = ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"]  # host waits
MiB = 1 << 20


def size(n: int) -> str:
    """Bytes in words: UINT64_MAX, 1 byte, 67,108,864 bytes (64 MiB)."""
    if n == 2**64 - 1:
        return "UINT64_MAX"
    return f"{n:,} byte{'s' if n != 1 else ''}" + (f" ({n / MiB:g} MiB)" if n >= MiB else "")


def show(table_rows, label, **kwargs):
    """Display a table under the check (imported here, so that importing the package needs no IPython)."""
    from IPython.display import display

    from .. import plots
    display(plots.Table(table_rows, label, **kwargs))


def within_limit(original: float, limit: float, of_limit: float, of_loss: float) -> float:
    """The time per iteration allowed above the limit: the larger of a share of the limit and a share of what
    the original loses (its time minus the limit's). Both are measured in the same program on the GPU at hand,
    so the allowance scales with the GPU (a T4's kernels are slower, an H100's host overhead dominates)."""
    return max(of_limit * limit, of_loss * (original - limit))


def judge_speed(report, original: float, limit: float, yours: float, allowed: float, min_speedup: float,
                figures: str, slow: str, baseline: str = "the original") -> None:
    """The speed target: at most limit + allowed, and min_speedup times faster than the original. Time decides only
    where it can: when the original itself is not min_speedup times slower than the target (the GPU's work hides
    what the host or the pool costs: a slow GPU, or one shared with other work), a right answer and a wrong one take
    about the same time, so the speed is said to be unverified on this run, and the other findings decide."""
    target = limit + allowed
    if original < min_speedup * target:
        report.unverified("the speed", f"{figures}. Here {baseline} itself takes only {original / target:.2f}× the "
                                       f"target, short of the {min_speedup:g}× that would tell a right answer from a "
                                       "wrong one: the GPU's work hides the difference on this run")
        return
    report.expect(yours <= target and original >= min_speedup * yours, f"speed: {figures}", f"speed: {figures}. {slow}")


def leaked(report, used_before: int, used_after: int, per_buffer: int, where: str, fix: str) -> bool:
    """The pool's memory in use after the learner's code (synchronized) must be what it was before: a finding."""
    extra = used_after - used_before
    if extra > 0:
        report.wrong(f"leak: after {where} the default pool still has {size(extra)} in use that it did not have "
                     f"before (about {extra / per_buffer:.0f} buffer(s) of {size(per_buffer)}): {fix}")
        return True
    report.ok(f"no leak: after {where} the default pool has no more memory in use than before ({size(used_after)})")
    return False
