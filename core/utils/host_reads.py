"""Host reads and data-dependent shapes, counted on any device (the CPU included).

On a GPU, a value read back to the host (`loss.item()`, `bool(t)`, `t.tolist()`) makes the host
wait for every kernel queued before it, and an op whose output shape depends on the data
(`nonzero`, a boolean mask index, `unique`) does the same to learn the shape. Either idles the
GPU while the host catches up. A GPU is rarely at hand here, so these are counted where the code
runs anyway: a dispatch mode sees every op torch dispatches, and the few reads that bypass
dispatch (`tolist`, `numpy`, `__array__`) are counted by wrapping them for the duration.

What it cannot see: a copy to the CPU of a tensor that is already on the CPU is no op at all, so
`.cpu()` counts only where the source is on another device (on a GPU, `torch.cuda.
set_sync_debug_mode` is the complete check; bench/gpu_check.py runs it).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that hand a value to the host.
HOST_READS = frozenset({"_local_scalar_dense", "equal", "is_nonzero", "allclose"})
# Ops whose output shape depends on the values (the host learns it by a read).
DATA_DEPENDENT = frozenset({"nonzero", "masked_select", "unique_dim", "_unique", "_unique2",
                            "unique_consecutive", "bincount", "repeat_interleave",
                            "masked_scatter"})
# Tensor methods that read the data without dispatching an op.
_UNDISPATCHED = ("tolist", "numpy", "__array__")


def _op_name(func: Any) -> str:
    """`aten.nonzero.default` -> `nonzero`."""
    return func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)


def _bool_index(args: tuple) -> bool:
    """An `index`/`index_put` whose indices hold a bool or uint8 mask (a hidden nonzero)."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
               for i in (indices or ()))


def _to_host(func_name: str, args: tuple, kwargs: dict, out: Any) -> bool:
    """A copy whose source is on a device and whose result is on the CPU."""
    if func_name not in ("_to_copy", "copy_") or not args or not isinstance(args[0], torch.Tensor):
        return False
    if func_name == "copy_":
        dst, src = args[0], args[1] if len(args) > 1 else None
        return isinstance(src, torch.Tensor) and src.device.type != "cpu" \
            and dst.device.type == "cpu"
    return args[0].device.type != "cpu" and isinstance(out, torch.Tensor) \
        and out.device.type == "cpu"


class HostReads(TorchDispatchMode):
    """Counts, by op name, every host read and every data-dependent shape while active.

    `reads` is a Counter: `_local_scalar_dense` (item, bool, int, float), `equal`, the
    data-dependent ops, `index (bool mask)`, `to host` (a device-to-CPU copy), and the
    undispatched `tolist`, `numpy`, `__array__`. `total` is their sum.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter = Counter()

    @property
    def total(self) -> int:
        return sum(self.reads.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _op_name(func)
        if name in HOST_READS or name in DATA_DEPENDENT:
            self.reads[name] += 1
        elif name in ("index", "index_put", "index_put_", "_index_put_impl_") \
                and _bool_index(args):
            self.reads[f"{name} (bool mask)"] += 1
        elif _to_host(name, args, kwargs, out):
            self.reads["to host"] += 1
        return out


@contextlib.contextmanager
def counting_host_reads() -> Iterator[HostReads]:
    """`with counting_host_reads() as counted: ...; counted.total`: every host read inside,
    dispatched or not (the undispatched Tensor methods are wrapped while inside)."""
    mode = HostReads()
    originals = {name: getattr(torch.Tensor, name) for name in _UNDISPATCHED}

    def wrap(name: str) -> Any:
        original = originals[name]

        def counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            mode.reads[name] += 1
            return original(self, *args, **kwargs)
        return counted

    try:
        for name in _UNDISPATCHED:
            setattr(torch.Tensor, name, wrap(name))
        with mode:
            yield mode
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
