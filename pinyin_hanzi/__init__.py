"""pinyin_hanzi: train an encoder-decoder Transformer that converts pinyin into Chinese characters.

``from pinyin_hanzi import Converter`` is the Python API (see converter.py). It is imported on first use, so
that ``import pinyin_hanzi.config`` and the like stay light (no torch)."""

__version__ = "0.2.0"  # the one source: pyproject.toml reads it from here
__all__ = ["Candidate", "Converter"]


def __getattr__(name: str):
    if name in __all__:
        from pinyin_hanzi.decoding import converter  # on first use: importing the package loads no torch

        return getattr(converter, name)
    raise AttributeError(f"module 'pinyin_hanzi' has no attribute {name!r}")
