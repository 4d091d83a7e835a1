"""pinyin_hanzi: train an encoder-decoder Transformer that converts pinyin into Chinese characters."""

__version__ = "0.1.0"
