"""Test-time cost per image, side by side with the original CornerNet-Lite at the same threads.

python bench/bench_test.py [--threads T] [--repeats R] [--images N]

1. Decoding + soft-NMS per image (everything `cornernet_inference` does, with the network
   replaced by synthetic head outputs of a 480 x 640 image: 511 x 767 input) for the Squeeze
   settings (stride 8, K=20, num_dets=100, no flip) and the CornerNet settings (stride 4, K=100,
   num_dets=1000, flip, soft-NMS). "original" is the 2019 algorithm written out below in torch
   and numpy (its decode is torch code and runs as it did; its soft-NMS was compiled Cython, so
   the numpy loop here is slower than it was, and the line also gives the original's time
   without any NMS at all, the ratio against which is a lower bound).
2. test.py end to end on CPU with an untrained CornerNet_Tiny on coco128's val split.
3. With CUDA: CornerNet-Squeeze (untrained weights) forward + decode, ms per image.

--threads 1 (the default) runs everything on one CPU thread, torch and OpenCV alike; --threads
0 uses every core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from _coco128 import COCO128  # bench/ is the script's folder

from core.config import check_db_config, load_config
from core.dbs import datasets
from core.inference.cornernet import cornernet_inference
from core.models.py_utils.decode import decode
from core.nnet.py_factory import NetworkFactory

ROOT = Path(__file__).resolve().parents[1]

IMAGE_HW = (480, 640)
SETTINGS = (("CornerNet_Squeeze", 8), ("CornerNet", 4))


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
    """Stands in for NetworkFactory: `test` decodes fixed synthetic heads of the input's size
    with `decode_fn` (this project's decode, or the original's)."""

    device = torch.device("cpu")

    def __init__(self, stride: int, decode_fn: Callable[..., torch.Tensor] = decode) -> None:
        self.stride = stride
        self.decode_fn = decode_fn
        self.heads: dict[tuple, list[torch.Tensor]] = {}

    def test(self, images: torch.Tensor, **kwargs: float) -> tuple[torch.Tensor]:
        batch, _, height, width = images.shape
        key = (batch, (height + 1) // self.stride, (width + 1) // self.stride)
        if key not in self.heads:
            self.heads[key] = synthetic_heads(*key)
        return (self.decode_fn(*self.heads[key], **kwargs),)


class SettingsDB:
    mean = np.array([0.40789654, 0.44719302, 0.47026115], dtype=np.float32)
    std = np.array([0.28863828, 0.27408164, 0.27809835], dtype=np.float32)

    def __init__(self, config_name: str) -> None:
        self.configs = load_config(config_name)[1]


# ---- the original CornerNet-Lite test path, written out (algorithm of 2019) ----------------

def original_decode(tl_heat: torch.Tensor, br_heat: torch.Tensor, tl_tag: torch.Tensor,
                    br_tag: torch.Tensor, tl_regr: torch.Tensor, br_regr: torch.Tensor,
                    K: int = 100, kernel: int = 1, ae_threshold: float = 1.0,
                    num_dets: int = 1000) -> torch.Tensor:
    """The original decoder: sigmoid and a max-pool over every class map, top-K over all
    pixels, all K x K pairs, rejections, top num_dets. (B, num_dets, 8) like `decode`."""
    batch, _, height, width = tl_heat.shape

    def corners(heat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        heat = torch.sigmoid(heat)
        peak = F.max_pool2d(heat, kernel, stride=1, padding=(kernel - 1) // 2)
        heat = heat * (peak == heat).float()
        scores, inds = heat.view(batch, -1).topk(K)
        clses = (inds // (height * width)).int()
        inds = inds % (height * width)
        return scores, inds, clses, (inds // width).float(), (inds % width).float()

    def gather(feat: torch.Tensor, inds: torch.Tensor) -> torch.Tensor:
        feat = feat.permute(0, 2, 3, 1).contiguous().view(batch, -1, feat.shape[1])
        return feat.gather(1, inds.unsqueeze(2).expand(-1, -1, feat.shape[2]))

    tl_scores, tl_inds, tl_clses, tl_ys, tl_xs = corners(tl_heat)
    br_scores, br_inds, br_clses, br_ys, br_xs = corners(br_heat)
    tl_off, br_off = gather(tl_regr, tl_inds), gather(br_regr, br_inds)
    tl_xs = (tl_xs + tl_off[..., 0]).view(batch, K, 1).expand(batch, K, K)
    tl_ys = (tl_ys + tl_off[..., 1]).view(batch, K, 1).expand(batch, K, K)
    br_xs = (br_xs + br_off[..., 0]).view(batch, 1, K).expand(batch, K, K)
    br_ys = (br_ys + br_off[..., 1]).view(batch, 1, K).expand(batch, K, K)
    boxes = torch.stack((tl_xs, tl_ys, br_xs, br_ys), dim=3)
    dists = (gather(tl_tag, tl_inds).view(batch, K, 1)
             - gather(br_tag, br_inds).view(batch, 1, K)).abs()
    tl_scores = tl_scores.view(batch, K, 1).expand(batch, K, K)
    br_scores = br_scores.view(batch, 1, K).expand(batch, K, K)
    scores = (tl_scores + br_scores) / 2
    tl_clses = tl_clses.view(batch, K, 1).expand(batch, K, K)
    br_clses = br_clses.view(batch, 1, K).expand(batch, K, K)
    scores[tl_clses != br_clses] = -1
    scores[dists > ae_threshold] = -1
    scores[br_xs < tl_xs] = -1
    scores[br_ys < tl_ys] = -1
    scores, inds = scores.view(batch, -1).topk(num_dets)

    def pick(values: torch.Tensor) -> torch.Tensor:
        values = values.contiguous().view(batch, -1, values.shape[-1] if values.dim() == 4
                                          else 1)
        return values.gather(1, inds.unsqueeze(2).expand(-1, -1, values.shape[2])).float()

    return torch.cat([pick(boxes), scores.unsqueeze(2), pick(tl_scores), pick(br_scores),
                      pick(tl_clses)], dim=2)


def original_soft_nms(boxes: np.ndarray, method: int, nms_threshold: float, sigma: float = 0.5,
                      threshold: float = 0.001) -> np.ndarray:
    """Greedy soft-NMS as the original's (compiled) loop does it, one pick at a time."""
    boxes = boxes.copy()
    count = len(boxes)
    for i in range(count):
        best = i + int(np.argmax(boxes[i:count, 4]))
        boxes[[i, best], :5] = boxes[[best, i], :5]
        rest = boxes[i + 1:count]
        x1, y1, x2, y2 = boxes[i, :4]
        iw = np.minimum(x2, rest[:, 2]) - np.maximum(x1, rest[:, 0]) + 1
        ih = np.minimum(y2, rest[:, 3]) - np.maximum(y1, rest[:, 1]) + 1
        hit = (iw > 0) & (ih > 0)
        inter = iw * ih
        union = (x2 - x1 + 1) * (y2 - y1 + 1) + (rest[:, 2] - rest[:, 0] + 1) * \
            (rest[:, 3] - rest[:, 1] + 1) - inter
        iou = np.where(hit, inter / np.where(hit, union, 1), 0)
        if method == 1:
            weight = np.where(iou > nms_threshold, 1 - iou, 1)
        elif method == 2:
            weight = np.exp(-iou * iou / sigma)
        else:
            weight = np.where(iou > nms_threshold, 0, 1)
        rest[:, 4] *= np.where(hit, weight, 1)
        keep = ~(hit & (rest[:, 4] < threshold))
        kept = rest[keep]
        boxes[i + 1:i + 1 + len(kept)] = kept
        count = i + 1 + len(kept)
        if count <= i + 1:
            break
    return boxes[:count]


def original_inference(db: SettingsDB, net: SyntheticNet, image: np.ndarray,
                       with_nms: bool = True) -> dict[int, np.ndarray]:
    """The original's `cornernet_inference` on one image (CPU tensors instead of CUDA)."""
    cfg = db.configs
    method = {"nms": 0, "linear_soft_nms": 1, "exp_soft_nms": 2}[cfg["nms_algorithm"]]
    height, width = image.shape[:2]
    strides = [(i + 1) // o for i, o in zip(cfg["input_size"], cfg["output_sizes"][0])]
    mean = torch.from_numpy(db.mean).view(1, 3, 1, 1)
    std = torch.from_numpy(db.std).view(1, 3, 1, 1)
    detections = []
    for scale in cfg["test_scales"]:
        new_h, new_w = int(height * scale), int(width * scale)
        inp_h, inp_w = new_h | 127, new_w | 127
        out_h, out_w = (inp_h + 1) // strides[0], (inp_w + 1) // strides[1]
        canvas = np.zeros((inp_h, inp_w, 3), dtype=np.float64)
        top, left = inp_h // 2 - new_h // 2, inp_w // 2 - new_w // 2
        canvas[top:top + new_h, left:left + new_w] = cv2.resize(image, (new_w, new_h)) / 255.
        images = np.zeros((1, 3, inp_h, inp_w), dtype=np.float32)
        images[0] = canvas.transpose((2, 0, 1))
        if cfg["test_flipped"]:
            images = np.concatenate((images, images[:, :, :, ::-1]), axis=0)
        images = torch.from_numpy(images)
        images -= mean
        images /= std
        dets = net.test(images, K=cfg["top_k"], kernel=cfg["nms_kernel"],
                        ae_threshold=cfg["ae_threshold"], num_dets=cfg["num_dets"])[0].numpy()
        if cfg["test_flipped"]:
            dets[1, :, [0, 2]] = out_w - dets[1, :, [2, 0]]
            dets = dets.reshape(1, -1, 8)
        xs, ys = dets[..., 0:4:2], dets[..., 1:4:2]
        xs /= out_w / inp_w
        ys /= out_h / inp_h
        xs -= left
        ys -= top
        np.clip(xs, 0, new_w, out=xs)
        np.clip(ys, 0, new_h, out=ys)
        dets[..., 0:4] /= scale
        detections.append(dets)
    detections = np.concatenate(detections, axis=1)[0]
    detections = detections[detections[:, 4] > -1]
    top_bboxes = {}
    for j in range(cfg["categories"]):
        boxes = detections[detections[:, -1] == j][:, 0:7].astype(np.float32)
        if with_nms and len(boxes):
            boxes = original_soft_nms(boxes, method, cfg["nms_threshold"])
        top_bboxes[j + 1] = boxes[:, 0:5]
    scores = np.hstack([b[:, 4] for b in top_bboxes.values()])
    if len(scores) > cfg["max_per_image"]:
        kth = len(scores) - cfg["max_per_image"]
        thresh = np.partition(scores, kth)[kth]
        top_bboxes = {j: b[b[:, 4] >= thresh] for j, b in top_bboxes.items()}
    return top_bboxes


# ---- measurements ---------------------------------------------------------------------------

def median_ms(work: Callable[[], object], repeats: int) -> float:
    work()  # warm-up; the synthetic heads are made here
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def bench_decode_nms(config_name: str, stride: int, repeats: int) -> None:
    db = SettingsDB(config_name)
    image = np.random.default_rng(0).integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)
    ours_net, original_net = SyntheticNet(stride), SyntheticNet(stride, original_decode)
    ours = median_ms(lambda: cornernet_inference(db, ours_net, image), repeats)
    original = median_ms(lambda: original_inference(db, original_net, image), repeats)
    no_nms = median_ms(lambda: original_inference(db, original_net, image, False), repeats)
    kept = sum(len(b) for b in cornernet_inference(db, ours_net, image).values())
    cfg = db.configs
    print(f"{config_name:18s} decode+soft-NMS per image: this project {ours:6.1f} ms, original "
          f"{original:6.1f} ms ({original / ours:4.1f}x), original without NMS {no_nms:6.1f} ms "
          f"({no_nms / ours:4.1f}x)  [K={cfg['top_k']}, num_dets={cfg['num_dets']}, "
          f"flip={cfg['test_flipped']}, {cfg['nms_algorithm']}, merge={cfg['merge_bbox']}, "
          f"{kept} boxes kept]")


def bench_test_py(images: int, threads: int) -> None:
    if not (COCO128 / "annotations" / "instances_coco128_val.json").is_file():
        print(f"test.py end to end: skipped, {COCO128} not found")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny = json.loads((ROOT / "configs" / "CornerNet_Tiny.json").read_text())
        tiny["system"].update({"dataset": "COCO", "val_split": "val", "max_iter": 1,
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
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else None
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(ROOT / "test.py"), "TinyCoco", "--config-dir",
                               str(tmp / "configs"), "--device", "cpu", "--images", str(images),
                               "--testiter", "0"],
                              capture_output=True, text=True, check=True, env=env)
        wall = time.perf_counter() - start
    line = next(line for line in done.stdout.splitlines() if "images/s" in line)
    print(f"test.py CornerNet_Tiny on CPU ({images} coco128 images, its test settings): {line}; "
          f"whole command {wall:.1f} s incl. start-up")


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
    parser.add_argument("--threads", type=int, default=1, help="CPU threads; 0: every core")
    parser.add_argument("--images", type=int, default=32, help="images for test.py")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
        cv2.setNumThreads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads "
          f"(torch and OpenCV, both sides), median of {args.repeats}")
    for name, stride in SETTINGS:
        bench_decode_nms(name, stride, args.repeats)
    bench_test_py(args.images, args.threads)
    bench_squeeze_gpu(args.repeats * 5)


if __name__ == "__main__":
    main()
