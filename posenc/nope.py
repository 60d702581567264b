"""NoPE: no positional encoding; order enters only through the causal mask.

Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in Transformers",
arXiv 2305.19466; Haviv et al. 2022, arXiv 2203.16634 (causal LMs learn positions without an encoding).
"""

from __future__ import annotations

from posenc.encoding import Encoding


class NoPE(Encoding):
    """Contributes nothing: every method of `Encoding` is already the identity."""

    name = "none"
    paper = "Kazemnejad et al. 2023, arXiv 2305.19466"
