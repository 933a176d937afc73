from setuptools import find_packages, setup

setup(
    name="cornernet-lite-modern",
    version="0.1.0",
    description="CornerNet, CornerNet-Squeeze and CornerNet-Saccade: trainer and evaluator",
    packages=find_packages(include=["core", "core.*"]),
    python_requires=">=3.9",
    install_requires=["torch>=2.1", "numpy", "opencv-python-headless", "tqdm"],
    extras_require={
        "coco": ["faster-coco-eval", "pycocotools"],
        "plot": ["matplotlib"],
        "tensorboard": ["tensorboard"],
        "submitit": ["submitit>=1.5"],  # tools/submit.py
        # tools/export.py and --runtime onnxruntime; the versions the export was checked with.
        "onnx": ["onnx==1.23.2", "onnxscript==0.7.2", "onnxruntime==1.32.0"],
        # --runtime openvino and the INT8 files (NNCF for OpenVINO; onnxruntime's quantizer
        # comes with the onnx extra); the versions they were checked with.
        "openvino": ["openvino==2026.4.1", "nncf==3.4.0"],
        # The tests read TensorBoard events back and draw the curves, so they need both extras;
        # ruff and import-linter keep the style and the floors of core/ (run by .ci/run).
        "test": ["pytest", "pytest-timeout", "faster-coco-eval", "pycocotools", "tensorboard",
                 "matplotlib", "submitit>=1.5", "ruff", "import-linter", "openvino==2026.4.1",
                 "nncf==3.4.0"],
    },
)
