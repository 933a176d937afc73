"""The defaults and choices of the deploy options a command line shows, without torch:
`cornernet export --max-map` and `cornernet benchmark --keep-float/--calib-images` print them
in their --help, which imports no torch; core/deploy/onnx_graph.py and quantize.py take them from
here.
"""

# Exported graphs are exact for output maps up to this side (input about 4x larger).
DEFAULT_MAX_MAP = 512
# INT8 copies: the training images they are calibrated on, and what keeps float weights
# ("heads": the last convolution of every head; core/deploy/quantize.py).
DEFAULT_IMAGES = 300
KEEP_FLOAT = ("heads", "none")
