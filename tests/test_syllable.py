"""The syllable bigram model (lm/syllable.py): counted from token lists, or block by block from a token store."""

import random

import numpy as np

from pinyin_hanzi.lm.syllable import START, SyllableBigrams


def test_counting_block_by_block_gives_the_counts_of_counting_all_at_once():
    rng = random.Random(1)
    tokens = ["<pad>", "<s>", "</s>", "<unk>", "ni", "hao", "，", "wo", "men", "1", "a", "zh*"]
    lists = [[rng.randrange(4, len(tokens)) for _ in range(rng.randrange(1, 9))] for _ in range(200)]
    weights = [rng.randrange(0, 3) for _ in lists]  # 0: a list no epoch trains on
    at_once = SyllableBigrams.count([[tokens[i] for i in ids] for ids, w in zip(lists, weights) for _ in range(w)])
    blocks = [(np.array([i for ids in lists[b : b + 30] for i in ids]), np.array([len(ids) for ids in lists[b : b + 30]]),
               np.array(weights[b : b + 30])) for b in range(0, len(lists), 30)]
    in_blocks = SyllableBigrams.count_blocks(blocks, tokens)
    assert in_blocks.unigrams == at_once.unigrams and in_blocks.bigrams == at_once.bigrams
    assert at_once.unigrams[START] > sum(weights)  # a punctuation mark or digit starts the chain again
    assert "zh*" not in at_once.unigrams  # a prefix token is no syllable
