"""Messages to the user: warnings that point at the user's line, errors in one line.

A fixed ``stacklevel`` points at the right frame only as long as nobody adds a
decorator or a helper between the public method and the ``warnings.warn`` call
(``@_fit_context``, a context manager's frames...).
:func:`warn` counts the frames instead: it points the warning at the first frame
outside mbkkm and scikit-learn (whose ``_fit_context`` and ``set_output``
wrappers sit between the user and the estimator), as pandas' ``find_stack_level``
does.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` pointing at the user's line."""
    dirs: tuple[str, ...] = (_HERE,)
    sklearn_file = getattr(sys.modules.get("sklearn"), "__file__", None)
    if sklearn_file:
        dirs += (os.path.dirname(os.path.abspath(sklearn_file)) + os.sep,)
    frame: FrameType | None = sys._getframe(1)
    level = 2  # 1 is this function; 2 its caller
    while frame is not None and frame.f_code.co_filename.startswith(dirs):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def one_line(exc: BaseException, *, with_type: bool = False) -> str:
    """The message of ``exc`` on one line (its whitespace runs made single spaces),
    after its type's name with ``with_type``; an OSError's without the "[Errno N]"
    that ``str`` puts first."""
    text = str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {str(exc.filename)!r}" if exc.filename else "")
    text = " ".join(text.split())
    return f"{type(exc).__name__}: {text}" if with_type else text
