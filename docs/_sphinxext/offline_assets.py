"""The site works offline: math rendered by a MathJax copy served from the build
itself, and no page loading a script or stylesheet from another host.

Sphinx's ``sphinx.ext.mathjax`` loads MathJax from a CDN by default, so a local
build (or an air-gapped reader) sees raw ``\\(...\\)``. MathJax 3.2.2 comes from the
``sphinx-mathjax-offline`` package on PyPI (the ``docs`` extra of
``pyproject.toml``); this extension copies the part of it that
``tex-chtml.js`` uses (about 7 of its 24 MB) into ``_static/mathjax`` and points
``mathjax_path`` there. Once the pages are written, it reads every HTML page and
warns (an error under ``sphinx-build -W``, as ``make docs`` runs it) about any
``<script src>`` or stylesheet ``<link>`` on another host.
"""

from __future__ import annotations

from html.parser import HTMLParser
from importlib import metadata
from pathlib import Path

from sphinx.errors import ConfigError
from sphinx.util import logging
from sphinx.util.fileutil import copy_asset

logger = logging.getLogger(__name__)

DISTRIBUTION = "sphinx-mathjax-offline"
MATHJAX_PATH = "mathjax/tex-chtml.js"  # relative to _static
# What tex-chtml.js (TeX in, HTML-CSS out, with the menu) reads: itself, its fonts,
# the TeX extensions it loads on demand (\require, autoload) and the accessibility
# tools the menu can switch on (explorer, speech).
PARTS = ("tex-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "ui", "a11y", "sre")


def mathjax_source() -> Path:
    """The folder of MathJax's files in the installed ``sphinx-mathjax-offline``."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise ConfigError(
            f"the documentation serves MathJax from the {DISTRIBUTION!r} package, which "
            "is not installed: pip install -e '.[docs]'"
        ) from None
    source = Path(dist.locate_file("sphinx-mathjax-offline/static/mathjax"))
    if not (source / MATHJAX_PATH.rpartition("/")[2]).is_file():
        raise ConfigError(f"{DISTRIBUTION}: no MathJax files at {source}")
    return source


def _use_local_mathjax(app, config):
    mathjax_source()  # refuse to build without it, before any work
    config.mathjax_path = MATHJAX_PATH


def _copy_mathjax(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in PARTS:
        destination = (target / part).parent if (source / part).is_file() else target / part
        copy_asset(source / part, destination)


class _RemoteAssets(HTMLParser):
    """The scripts and stylesheets of a page that come from another host."""

    def __init__(self):
        super().__init__()
        self.remote = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        url = None
        if tag == "script":
            url = attrs.get("src")
        elif tag == "link" and "stylesheet" in (attrs.get("rel") or "").split():
            url = attrs.get("href")
        if url and url.startswith(("http://", "https://", "//")):
            self.remote.append(url)


def remote_assets(html: str) -> list[str]:
    """URLs of the scripts and stylesheets that ``html`` loads from another host."""
    parser = _RemoteAssets()
    parser.feed(html)
    return parser.remote


def _check_offline(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in sorted(outdir.rglob("*.html")):
        for url in remote_assets(page.read_text(encoding="utf-8")):
            logger.warning(
                "%s loads %s from another host: the site must work offline",
                page.relative_to(outdir),
                url,
                type="offline_assets",
            )


def setup(app):
    app.setup_extension("sphinx.ext.mathjax")
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _check_offline, priority=900)  # after the copy
    return {"parallel_read_safe": True, "parallel_write_safe": True}
