"""Where the benchmarks find coco128 and the parity references: the tests' one rule, in
tests/_data.py (CORNERNET_DATA, then ../shared beside the checkout, then ./shared inside it;
the tests also take their own subset, the benchmarks the full set only)."""

try:
    from tests._data import ENV, coco128_dir, is_full, looked_in, reference_dir
except ImportError:  # a script run from bench/ that has not put the checkout on the path yet
    import _checkout  # noqa: F401 - the checkout's root on sys.path

    from tests._data import ENV, coco128_dir, is_full, looked_in, reference_dir

__all__ = ["ENV", "coco128_dir", "is_full", "looked_in", "reference_dir"]
