"""The registry of positional encodings: `model.posenc` → an `Encoding` subclass (see posenc/encoding.py).

One line per encoding; `get_encoding` is the only lookup, and an unknown name raises a ValueError listing
the valid ones.
"""

from __future__ import annotations

from posenc.alibi import Alibi
from posenc.cope import CoPE
from posenc.encoding import Encoding
from posenc.fire import Fire
from posenc.kerple import Kerple
from posenc.learned import Learned
from posenc.local_global import LocalGlobalRope
from posenc.nope import NoPE
from posenc.p_rope import PRope
from posenc.rope import Rope
from posenc.sinusoidal import Sinusoidal
from posenc.t5 import T5Bias
from posenc.xpos import XPos

ENCODINGS: dict[str, type[Encoding]] = {cls.name: cls for cls in (
    NoPE,
    Sinusoidal,
    Learned,
    Rope,
    XPos,
    PRope,
    LocalGlobalRope,
    Alibi,
    T5Bias,
    Kerple,
    Fire,
    CoPE,
)}
POSENCS = tuple(ENCODINGS)


def get_encoding(name: str) -> type[Encoding]:
    """The encoding class registered as `name`.

    Raises:
      ValueError: `name` is not registered (the message lists every valid name).
    """
    if name not in ENCODINGS:
        raise ValueError(f"model.posenc must be one of {POSENCS}, got {name!r}")
    return ENCODINGS[name]
