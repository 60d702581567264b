"""The device mesh of training: data parallelism, and FSDP (fully sharded data parallelism).

The mesh has two axes, `data` and `fsdp` (`config.mesh.fsdp` devices along `fsdp`, the rest along `data`).
The batch is split over both: every device gets its own rows. With `fsdp = 1` parameters and optimiser
state are replicated (plain data parallelism). With `fsdp = k > 1`, every parameter and its optimiser
moments are split along their largest axis that k divides, over the `fsdp` devices, so each device holds
about 1/k of them; XLA gathers a layer's weights where the step needs them and reduce-scatters their
gradients (ZeRO-3, Rajbhandari et al. 2020, arXiv 1910.02054; PyTorch FSDP). Leaves no axis of which k
divides (scalars, odd shapes) stay replicated. The values are those of one device up to summation order.

When to use it: when parameters plus AdamW's two moments (12 bytes per parameter in float32) no longer fit
next to the activations on one device. For the models of this repository on CPU they fit, and FSDP only
adds communication.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXES = ("data", "fsdp")


def make_mesh(devices, fsdp: int = 1) -> Mesh:
    """A `(len(devices) / fsdp, fsdp)` mesh over `devices`.

    Raises:
      ValueError: `fsdp` does not divide the number of devices.
    """
    n = len(devices)
    if isinstance(fsdp, bool) or not isinstance(fsdp, int) or fsdp < 1 or n % fsdp:
        raise ValueError(f"config.mesh.fsdp must be a positive integer dividing the {n} devices, got {fsdp!r}")
    return Mesh(np.asarray(devices).reshape(n // fsdp, fsdp), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows of a batch over every device of the mesh."""
    return NamedSharding(mesh, P(AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def leaf_sharding(mesh: Mesh, shape) -> NamedSharding:
    """FSDP's sharding of one array: its largest axis that the `fsdp` size divides, over `fsdp`."""
    k = mesh.shape["fsdp"]
    if k > 1:
        for axis in sorted(range(len(shape)), key=lambda a: -shape[a]):
            if shape[axis] % k == 0:
                spec = [None] * len(shape)
                spec[axis] = "fsdp"
                return NamedSharding(mesh, P(*spec))
    return replicated(mesh)


def tree_shardings(mesh: Mesh, tree):
    """`leaf_sharding` of every array in a pytree (parameters, optimiser state, or their abstract shapes)."""
    return jax.tree.map(lambda x: leaf_sharding(mesh, np.shape(x)), tree)
