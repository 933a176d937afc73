"""Test-time cost per image: decoding + soft-NMS on CPU, test.py end to end, model on GPU.

python bench/bench_test.py [--images N] [--repeats R]

1. Decoding + mapping + per-class soft-NMS (`cornernet_inference` with the network replaced by
   synthetic head outputs of a 480 x 640 image: 511 x 767 input) on CPU, for the Squeeze settings
   (stride 8, K=20, num_dets=100, no flip) and the CornerNet settings (stride 4, K=100,
   num_dets=1000, flip, merge soft-NMS). The original reports 26 ms and 185 ms per image there.
2. test.py end to end on CPU (reading, inference, COCO evaluation) with an untrained
   CornerNet_Tiny at CornerNet_Tiny's test settings on coco128's val split.
3. With CUDA: CornerNet-Squeeze (untrained weights) forward + decode, ms per image.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from core.config import check_db_config, load_config
from core.dbs import datasets
from core.inference.cornernet import cornernet_inference
from core.models.py_utils.decode import decode
from core.nnet.py_factory import NetworkFactory

ROOT = Path(__file__).resolve().parents[1]

COCO128 = ROOT.parent / "shared" / "data" / "coco128"
IMAGE_HW = (480, 640)


def synthetic_heads(batch: int, height: int, width: int, objects: int = 15,
                    classes: int = 80, seed: int = 0) -> list[torch.Tensor]:
    """Head outputs that look trained: low background logits, a corner pair per object with a
    shared embedding, and blurred neighbours so max-pool NMS has work to do."""
    rng = np.random.default_rng(seed)
    heats = rng.normal(-6, 1.0, (2, batch, classes, height, width)).astype(np.float32)
    tags = rng.normal(0, 2.0, (2, batch, 1, height, width)).astype(np.float32)
    for b in range(batch):
        for _ in range(objects):
            cls, tag = rng.integers(classes), rng.normal(0, 3)
            x1, y1 = rng.integers(0, width - 4), rng.integers(0, height - 4)
            x2, y2 = rng.integers(x1 + 2, width), rng.integers(y1 + 2, height)
            for k, (y, x) in enumerate(((y1, x1), (y2, x2))):
                heats[k, b, cls, max(y - 1, 0):y + 2, max(x - 1, 0):x + 2] = rng.uniform(-1, 1)
                heats[k, b, cls, y, x] = rng.uniform(0, 3)
                tags[k, b, 0, y, x] = tag
    offsets = rng.uniform(0, 1, (2, batch, 2, height, width)).astype(np.float32)
    return [torch.from_numpy(a) for a in (heats[0], heats[1], tags[0], tags[1],
                                          offsets[0], offsets[1])]


class SyntheticNet:
    """Stands in for NetworkFactory: `test` decodes fixed synthetic heads of the input's size."""

    device = torch.device("cpu")

    def __init__(self, stride: int) -> None:
        self.stride = stride
        self.heads: dict[tuple, list[torch.Tensor]] = {}

    def test(self, images: torch.Tensor, **kwargs) -> tuple[torch.Tensor]:
        batch, _, height, width = images.shape
        key = (batch, (height + 1) // self.stride, (width + 1) // self.stride)
        if key not in self.heads:
            self.heads[key] = synthetic_heads(*key)
        return (decode(*self.heads[key], **kwargs),)


class SettingsDB:
    mean = np.array([0.40789654, 0.44719302, 0.47026115], dtype=np.float32)
    std = np.array([0.28863828, 0.27408164, 0.27809835], dtype=np.float32)

    def __init__(self, config_name: str) -> None:
        self.configs = load_config(config_name)[1]


def bench_decode_nms(config_name: str, stride: int, repeats: int) -> float:
    db = SettingsDB(config_name)
    net = SyntheticNet(stride)
    image = np.zeros((*IMAGE_HW, 3), np.uint8)
    cornernet_inference(db, net, image)  # warm-up, and the synthetic heads are made once
    start = time.perf_counter()
    for _ in range(repeats):
        top = cornernet_inference(db, net, image)
    ms = 1000 * (time.perf_counter() - start) / repeats
    kept = sum(len(b) for b in top.values())
    cfg = db.configs
    print(f"{config_name:18s} decode+soft-NMS on CPU: {ms:7.1f} ms/image  (K={cfg['top_k']}, "
          f"num_dets={cfg['num_dets']}, flip={cfg['test_flipped']}, "
          f"merge={cfg['merge_bbox']}, {kept} boxes kept)")
    return ms


def bench_test_py(images: int) -> None:
    if not (COCO128 / "annotations" / "instances_coco128_val.json").is_file():
        print(f"test.py end to end: skipped, {COCO128} not found")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny = json.loads((ROOT / "configs" / "CornerNet_Tiny.json").read_text())
        tiny["system"].update({"dataset": "COCO", "val_split": "val", "max_iter": 0,
                               "cache_dir": str(tmp / "cache"), "result_dir": str(tmp / "res")})
        tiny["db"].update({"categories": 80,
                           "image_dirs": {"val": str(COCO128 / "images")},
                           "annotation_files": {"val": str(COCO128 / "annotations" /
                                                           "instances_coco128_val.json")}})
        (tmp / "configs").mkdir()
        (tmp / "configs" / "TinyCoco.json").write_text(json.dumps(tiny))
        system_config, db_config = load_config("TinyCoco", tmp / "configs")
        db = datasets["COCO"](db_config, split=None, sys_config=system_config)
        NetworkFactory(system_config, db, device="cpu").save_params(0)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(ROOT / "test.py"), "TinyCoco", "--config-dir",
                               str(tmp / "configs"), "--device", "cpu", "--images", str(images)],
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
    loop = next(line for line in done.stdout.splitlines() if "ms per image" in line)
    print(f"test.py CornerNet_Tiny on CPU ({images} coco128 images, 1 scale, no flip): {loop}; "
          f"whole command {wall:.1f} s incl. start-up and COCO evaluation")


def bench_squeeze_gpu(repeats: int) -> None:
    if not torch.cuda.is_available():
        print("CornerNet_Squeeze on GPU: skipped, no CUDA device")
        return
    from core.models.CornerNet_Squeeze import model

    cfg = check_db_config(json.loads((ROOT / "configs" / "CornerNet_Squeeze.json").read_text())
                          ["db"])
    net = model().cuda().eval()
    images = torch.randn(1, 3, 511, 767, device="cuda")
    kwargs = {"K": cfg["top_k"], "kernel": cfg["nms_kernel"], "ae_threshold": cfg["ae_threshold"],
              "num_dets": cfg["num_dets"]}
    with torch.no_grad():
        for _ in range(5):
            net(images, test=True, **kwargs)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            net(images, test=True, **kwargs)[0].cpu()
        torch.cuda.synchronize()
    ms = 1000 * (time.perf_counter() - start) / repeats
    print(f"CornerNet_Squeeze forward+decode on {torch.cuda.get_device_name()}: {ms:.1f} ms/image "
          f"(511 x 767 input, fp32, batch 1)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32, help="images for test.py")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    bench_decode_nms("CornerNet_Squeeze", 8, args.repeats)
    bench_decode_nms("CornerNet", 4, args.repeats)
    bench_test_py(args.images)
    bench_squeeze_gpu(args.repeats * 5)


if __name__ == "__main__":
    main()
