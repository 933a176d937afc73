"""The project's layout as it was specified (`python setup.py ...`, `pip install -e .` with an
old pip): everything is declared in pyproject.toml; this file only hands over to setuptools."""

from setuptools import setup

setup()
