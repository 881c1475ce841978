"""Sphinx configuration: the guide is Markdown (MyST), the API reference comes from the docstrings.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (CI does; warnings fail it).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mjsched.version import __version__  # noqa: E402

project = "mjsched"
author = "the mjsched developers"
release = version = __version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode", "sphinxcontrib.mermaid"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
myst_fence_as_directive = ["mermaid"]   # ```mermaid blocks render as diagrams (sphinxcontrib-mermaid)
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
# Names the docstrings mention that Sphinx cannot resolve (stdlib and driver internals).
nitpicky = False
suppress_warnings = ["myst.xref_missing"]
html_theme = "furo"
html_title = f"mjsched {release}"
