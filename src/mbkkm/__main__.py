"""The ``mbkkm`` command's entry point (``python -m mbkkm`` too).

It imports the command line (:mod:`mbkkm.cli`) and runs it; when the ``cli``
extra is not installed it says which extra to install, in one line, instead of a
traceback ending in ``No module named 'click'``.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the ``mbkkm`` command; exit status 1 when its extra is missing."""
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as exc:
        # click is the one module of the ``cli`` extra that mbkkm.cli imports up front
        if exc.name is None or exc.name.partition(".")[0] != "click":
            raise
        sys.stderr.write(
            f"Error: the mbkkm command needs the 'cli' extra (missing: {exc.name}). "
            'Install it with: pip install "mbkkm[cli]" (from a clone of the '
            'repository: pip install -e ".[cli]").\n'
        )
        return 1
    return cli_main(prog_name="mbkkm")


if __name__ == "__main__":  # pragma: no cover - python -m mbkkm
    sys.exit(main())
