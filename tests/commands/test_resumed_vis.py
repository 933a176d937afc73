"""A resumed test.py draws the pictures of every image --vis asks for (issue 28, case 38).

In-process: test.py's main on the tiny coco128 config, stopped once between journalling an
image and drawing it, the way a kill lands; then run again with the same settings.
"""


import pytest
from _tiny_coco import make_tiny_coco

from core.utils import vis as vis_module
from cornernet.commands import test as test_script


def evaluate(root, *args):
    return test_script.run(test_script.parse_args([
        "CocoTiny", "--testiter", "0", "--config-dir", str(root / "configs"), "--device",
        "cpu", "--images", "4", "--vis", "4", "--vis-thresh", "0", *args]))


@pytest.mark.slow  # 4 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_a_resumed_run_draws_the_pictures_the_stopped_run_journalled_but_never_drew(
        coco128, tmp_path, monkeypatch):
    root = make_tiny_coco(coco128, tmp_path)
    vis = root / "results" / "CocoTiny" / "0" / "val" / "vis"
    draw = vis_module.save_detections
    drawn = []

    def stopped_on_the_second_picture(path, *args, **kwargs):
        if drawn:
            raise KeyboardInterrupt  # the image is journalled; its picture never comes
        drawn.append(path.name)
        return draw(path, *args, **kwargs)

    monkeypatch.setattr(vis_module, "save_detections", stopped_on_the_second_picture)
    with pytest.raises(KeyboardInterrupt):
        evaluate(root)
    monkeypatch.setattr(vis_module, "save_detections", draw)
    assert sorted(p.name for p in vis.iterdir()) == ["529.jpg"]
    journal = (root / "results" / "CocoTiny" / "0" / "val" / "partial.jsonl").read_text()
    assert journal.count("\n") == 3  # header, 529 and 531: 531 was detected, not drawn

    assert evaluate(root) is not None  # resumed: 529 and 531 from the journal
    resumed = {p.name: p.read_bytes() for p in vis.iterdir()}
    assert len(resumed) == 4 and {"529.jpg", "531.jpg"} <= set(resumed)

    # The same pictures as an uninterrupted run's, byte for byte.
    for path in vis.iterdir():
        path.unlink()
    evaluate(root)
    assert {p.name: p.read_bytes() for p in vis.iterdir()} == resumed
