"""demo.py: pictures of the user's own files, never over an input, one line per mistake.

demo.py runs in the test process (`inproc`); the read-only --out, which needs a mount
namespace, is demo.py's one real process (`slow`)."""

import shutil
import subprocess

import cv2
import pytest
from _tiny_coco import ROOT, inproc, make_tiny_coco, script, script_env

from cornernet.outputs import output_files


@pytest.fixture
def tiny_coco(coco128, tmp_path):
    return make_tiny_coco(coco128, tmp_path)


def demo(root, *args):
    return inproc("demo.py", "CocoTiny", "--testiter", 0, "--thresh", 0.0, "--device", "cpu",
                  "--config-dir", root / "configs", *args)


def photos(coco128, folder, names=("000000000529.jpg", "000000000531.jpg")):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(coco128 / "images" / name, folder / name)
    return folder


def test_draws_a_picture_of_the_input_size(tiny_coco, coco128):
    image = coco128 / "images" / "000000000529.jpg"
    done = demo(tiny_coco, "--images", image, "--out", tiny_coco / "pictures")
    assert done.returncode == 0, done.stderr
    drawn = cv2.imread(str(tiny_coco / "pictures" / "000000000529.jpg"))
    assert drawn.shape == cv2.imread(str(image)).shape


def test_folder_means_its_images_and_bad_files_are_named(tiny_coco, coco128):
    folder = photos(coco128, tiny_coco / "mine")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (folder / "notes.txt").write_text("shopping list")
    done = demo(tiny_coco, "--images", folder, "--out", tiny_coco / "pictures")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tiny_coco / "pictures").iterdir()) == [
        ".demo-drawn", "000000000529.jpg", "000000000531.jpg", "detections.jsonl"]
    assert len((tiny_coco / "pictures" / "detections.jsonl").read_text().splitlines()) == 2
    assert "broken.jpg" in done.stdout and "notes.txt" in done.stdout
    assert "drew 2 of 4 inputs" in done.stdout


def test_out_equal_to_the_input_folder_leaves_the_inputs_untouched(tiny_coco, coco128):
    folder = photos(coco128, tiny_coco / "mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    done = demo(tiny_coco, "--images", folder, "--out", folder)
    assert done.returncode == 0, done.stderr
    assert {name: (folder / name).read_bytes() for name in before} == before
    drawn = sorted({p.name for p in folder.iterdir()} - set(before))
    assert drawn == [".demo-drawn", "000000000529-2.jpg", "000000000531-2.jpg",
                     "detections.jsonl"]


def test_out_equal_to_the_input_folder_twice_never_draws_on_its_own_pictures(tiny_coco, coco128):
    folder = photos(coco128, tiny_coco / "mine")
    first = demo(tiny_coco, "--images", folder, "--out", folder)
    assert first.returncode == 0, first.stderr
    kept = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ".demo-drawn"}
    refused = demo(tiny_coco, "--images", folder, "--out", folder)
    assert refused.returncode == 2 and "--exist-ok" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    again = demo(tiny_coco, "--images", folder, "--out", folder, "--exist-ok")
    assert again.returncode == 0, again.stderr
    assert "drew 2 of 2 inputs" in again.stdout  # the two photos, not the earlier outputs
    assert sorted(p.name for p in folder.iterdir()) == [
        ".demo-drawn", "000000000529-2.jpg", "000000000529-3.jpg", "000000000529.jpg",
        "000000000531-2.jpg", "000000000531-3.jpg", "000000000531.jpg", "detections-2.jsonl",
        "detections.jsonl"]
    assert {name: (folder / name).read_bytes() for name in kept} == kept  # nothing written over


def test_same_stem_inputs_get_their_own_pictures(tiny_coco, coco128):
    folder = photos(coco128, tiny_coco / "mine", ("000000000529.jpg",))
    image = cv2.imread(str(folder / "000000000529.jpg"))
    cv2.imwrite(str(folder / "000000000529.png"), image[:100])
    done = demo(tiny_coco, "--images", folder / "000000000529.jpg", folder / "000000000529.png",
                "--out", tiny_coco / "pictures")
    assert done.returncode == 0, done.stderr
    jpg = cv2.imread(str(tiny_coco / "pictures" / "000000000529_jpg.jpg"))
    png = cv2.imread(str(tiny_coco / "pictures" / "000000000529_png.jpg"))
    assert jpg.shape == image.shape and png.shape == (100, *image.shape[1:])


def test_output_names_are_distinct_and_never_an_input(tmp_path):
    inputs = [tmp_path / "a" / "x.jpg", tmp_path / "b" / "x.jpg", tmp_path / "a" / "x.png",
              tmp_path / "a" / "y.jpg"]
    outputs = output_files(inputs, tmp_path / "a")
    assert [p.name for p in outputs] == ["x_jpg.jpg", "x_jpg-2.jpg", "x_png.jpg", "y-2.jpg"]


def test_no_readable_input_is_an_error(tiny_coco):
    (tiny_coco / "notes.txt").write_text("shopping list")
    done = demo(tiny_coco, "--images", tiny_coco / "notes.txt", "--out", tiny_coco / "pictures")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: none of the 1 inputs is a readable image"]


@pytest.mark.parametrize("args, words", [
    (["--images", "missing.jpg"], "missing.jpg"),
    (["--testiter", 5], "no snapshot for iteration 5"),
])
def test_mistakes_are_one_line(tiny_coco, coco128, args, words):
    if "--testiter" in args:
        args = [*args, "--images", coco128 / "images" / "000000000529.jpg"]
    done = inproc("demo.py", "CocoTiny", "--device", "cpu", "--config-dir",
                  tiny_coco / "configs", "--out", tiny_coco / "pictures", *map(str, args))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr


@pytest.mark.slow  # demo.py's real process
def test_an_unwritable_out_is_one_line_before_any_image(tiny_coco, coco128):
    """A read-only --out (a mount, as root ignores permissions) is found before the network is
    built and the first image drawn."""
    from _faults import in_mount_namespace

    out = tiny_coco / "ro"
    out.mkdir()
    cmd = script("demo.py", "CocoTiny", "--testiter", 0, "--device", "cpu", "--config-dir",
                 tiny_coco / "configs", "--images", coco128 / "images" / "000000000529.jpg",
                 "--out", out)
    done = subprocess.run(in_mount_namespace(f"mount -t tmpfs -o ro,size=1m none {out}", cmd),
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=script_env(), check=False)
    if "unshare" in done.stderr and "Operation not permitted" in done.stderr:
        pytest.skip("this machine does not allow private mount namespaces (unshare -rm)")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: cannot write in {out}") and "--out" in lines[0]
    assert "detections above" not in done.stdout and not list(out.iterdir())
