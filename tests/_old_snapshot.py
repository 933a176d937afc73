"""A snapshot in the layout main @ b09d064 wrote (`core.nnet.checkpoint.save` reading the
factory's attributes), spelled out key by key as that commit wrote it, not built with today's
`state_dict`: a change of today's layout cannot hide a break with the old one."""

from __future__ import annotations

import json

import torch

from core.nnet.py_factory import NetworkFactory

SYSTEM = {"opt_algo": "adam", "learning_rate": 0.001, "ema_decay": 0.9, "ema_warmup": 0}
LOOP_STATE = {"best": {"iteration": 2, "AP": 0.125}, "time": 12.5,
              "counts": {"images": 8, "skipped_steps": 0},
              "data": {"next_batch": 2, "world_size": 1, "batch_size": 4, "chunks": [4]}}


def plain(value):
    """JSON-like python values, as the old `checkpoint.plain` stored the config."""
    return json.loads(json.dumps(value, default=str))


def old_snapshot(nnet: NetworkFactory, iteration: int) -> dict:
    """The dict main @ b09d064 saved: format, iteration, model, optimizer, config, rng, the
    loop's state, and the weight average as torch's AveragedModel state dict."""
    averaged = nnet.ema.averaged
    return {
        "format": "cornernet-lite-modern/1",
        "iteration": iteration,
        "model": nnet.model.state_dict(),
        "optimizer": nnet.optimizer.state_dict(),
        "config": {"system": plain(nnet.system_config.full), "db": plain(nnet.db_configs)},
        "rng": {"torch": torch.get_rng_state()},
        **LOOP_STATE,
        "ema": {**{f"module.{k}": v for k, v in averaged.module.state_dict().items()},
                "n_averaged": averaged.n_averaged},
    }
