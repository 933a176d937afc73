"""The defaults and choices of the deploy options a command line shows, without torch:
`cornernet export --opset/--max-map` and `cornernet benchmark --keep-float/--calib-images` print
them in their --help, which imports no torch; core/deploy/exporter.py and quantize.py take them
from here.
"""

from ..errors import UsageError

# The opset an export writes, and those the exporter and onnxruntime can both hold for this graph
# (torch's exporter writes opset 18 and converts; below 18 the conversion of our ops fails).
DEFAULT_OPSET = 18
OPSETS = range(18, 24)
# The runtime an export is for when none is named: the one that reads the .onnx as it is.
EXPORTS_TO = "onnxruntime"
# Exported graphs are exact for output maps up to this side (input about 4x larger).
DEFAULT_MAX_MAP = 512
# INT8 copies: the training images they are calibrated on, and what keeps float weights
# ("heads": the last convolution of every head; core/deploy/quantize.py).
DEFAULT_IMAGES = 300
KEEP_FLOAT = ("heads", "none")


def check_export(opset: int, max_map: int) -> None:
    """The opset and --max-map an export can write, or a one-line UsageError."""
    if opset not in OPSETS:
        raise UsageError(f"--opset {opset}: this export writes opsets {OPSETS.start} to "
                         f"{OPSETS.stop - 1}")
    if max_map < 1:
        raise UsageError(f"--max-map must be at least 1, got {max_map}")
