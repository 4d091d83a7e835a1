"""Typed and corpus text: syllables and readings, what users type, shuangpin, the lexicon."""
