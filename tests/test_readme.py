"""The root README's numbers are rendered from committed results (scripts/render_readme.py)."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render_readme", ROOT / "scripts" / "render_readme.py")
render_readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_readme)


def test_readme_is_rendered_from_the_committed_results():
    """Fails when a result changed and the README was not rerendered (python scripts/render_readme.py)."""
    text = (ROOT / "README.md").read_text()
    regions = [m.group(2) for m in render_readme.REGION.finditer(text)]
    assert set(regions) == set(render_readme.RENDERERS)  # every renderer is used, every region has one
    assert render_readme.render(text) == text


def test_a_stale_or_unknown_region_is_caught():
    stale = "x <!-- rendered:quickstart-time -->about 1 minute<!-- /rendered --> y"
    assert render_readme.render(stale) != stale and "run_info.json" in render_readme.render(stale)
    with pytest.raises(ValueError, match="no renderer"):
        render_readme.render("<!-- rendered:nonesuch -->\n<!-- /rendered -->")
