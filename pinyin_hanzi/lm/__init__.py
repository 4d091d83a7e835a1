"""The language models fused into search: character n-grams, words, syllable bigrams."""
