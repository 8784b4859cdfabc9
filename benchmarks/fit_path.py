"""How far ``fit`` is from the maths: the files and functions of mbkkm a fit enters.

``python benchmarks/fit_path.py`` profiles a small dense
``MiniBatchKernelKMeans(...).fit(X)`` (a second fit, so that imports are not
counted) and prints how many of mbkkm's source files and functions it enters
before the first call of the mini-batch step, and in the whole fit. ``--list``
prints them in order of first call. The same count over scikit-learn's
``MiniBatchKMeans.fit`` (its files and functions before the first
``_mini_batch_step``) is printed for comparison.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

#: The functions that are "the step": the first call of one ends the path.
STEPS = {"minibatch_step", "stored_step", "step_windows", "advance", "_mini_batch_step"}

#: Code objects that are expressions, not functions: every comprehension (Python 3.12
#: inlines them, PEP 709, so that they would not be counted there either) and lambdas.
EXPRESSIONS = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"}


def _profile(fit, package_dir):
    """(functions before the first step, functions in the whole fit), in call order."""
    seen, before = [], None

    def hook(frame, event, arg):
        nonlocal before
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(package_dir):
            return
        if code.co_name in STEPS and before is None:
            before = list(seen)
        key = (code.co_filename, code.co_qualname)
        if key not in seen and code.co_name not in EXPRESSIONS:
            seen.append(key)

    sys.setprofile(hook)
    try:
        fit()
    finally:
        sys.setprofile(None)
    return before if before is not None else list(seen), seen


def _report(name, before, whole, root, listing):
    files = {f for f, _ in before}
    print(
        f"{name}: {len(files)} files and {len(before)} functions before the first step; "
        f"{len({f for f, _ in whole})} files and {len(whole)} functions in the whole fit"
    )
    if listing:
        for f, q in before:
            print(f"    {Path(f).relative_to(root)}:{q}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the functions before the step")
    args = parser.parse_args(argv)

    import sklearn
    from sklearn.cluster import MiniBatchKMeans

    import mbkkm
    from mbkkm import MiniBatchKernelKMeans

    X = np.random.default_rng(0).normal(size=(2000, 8)).astype(np.float32)
    ours = MiniBatchKernelKMeans(5, gamma=0.1, batch_size=256, max_iter=5, random_state=0)
    ours.fit(X)
    root = str(Path(mbkkm.__file__).parent)
    before, whole = _profile(lambda: ours.fit(X), root)
    _report("mbkkm MiniBatchKernelKMeans.fit", before, whole, Path(root), args.list)

    theirs = MiniBatchKMeans(5, batch_size=256, max_iter=5, n_init=1, random_state=0)
    theirs.fit(X)
    root = str(Path(sklearn.__file__).parent)
    before, whole = _profile(lambda: theirs.fit(X), root)
    _report("scikit-learn MiniBatchKMeans.fit", before, whole, Path(root), args.list)


if __name__ == "__main__":
    main()
