"""Freezing parts of a model for fine-tuning: `system.freeze` lists parameter-name prefixes.

A frozen parameter gets no gradient and is left out of the optimizer; a batch norm under a frozen
prefix stays in eval mode during training, so its running statistics stay those it was given.
"""

from __future__ import annotations

import difflib

from torch import nn

from ..errors import ConfigError


def _under(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p.rstrip(".") + ".") for p in prefixes)


def freeze(model: nn.Module, prefixes: list[str] | None) -> list[str]:
    """Stop the gradients of every parameter under one of `prefixes`; returns their names.

    A prefix matches whole name components: "hg.pre" freezes "hg.pre.0.conv.weight", not
    "hg.prefix.weight". A prefix that matches nothing is a ConfigError naming the closest module.
    """
    if not prefixes:
        return []
    names = [name for name, _ in model.named_parameters()]
    modules = [name for name, _ in model.named_modules() if name]
    for prefix in prefixes:
        if not isinstance(prefix, str) or not any(_under(n, [prefix]) for n in names):
            near = difflib.get_close_matches(str(prefix), modules, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise ConfigError(f"system.freeze: '{prefix}' names no parameter of the model{hint}")
    frozen = []
    for name, param in model.named_parameters():
        if _under(name, prefixes):
            param.requires_grad_(False)
            frozen.append(name)
    if len(frozen) == len(names):
        raise ConfigError(f"system.freeze {prefixes} freezes every parameter of the model: "
                          f"nothing would train; freeze fewer modules (e.g. 'hg.pre')")
    return frozen


def frozen_norms_to_eval(model: nn.Module, prefixes: list[str] | None) -> None:
    """Put the batch norms under `prefixes` in eval mode (call after `model.train()`)."""
    for name, module in model.named_modules():
        if prefixes and isinstance(module, nn.modules.batchnorm._BatchNorm) \
                and _under(name, prefixes):
            module.eval()
