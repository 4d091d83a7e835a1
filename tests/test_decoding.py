import torch

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.data import Vocab
from pinyin_hanzi.decoding import Converter
from pinyin_hanzi.model import Transformer
from pinyin_hanzi.pinyin import readings

HANZI = list("你好妮号我们门北京经吧八，。1") + ["A"]
PINYIN = ["ni", "hao", "wo", "men", "bei", "jing", "ba", "，", "。", "1", "A"]


def _untrained_converter(seed=0) -> Converter:
    """An untrained model: whatever it prefers, the constraint must hold."""
    torch.manual_seed(seed)
    config = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, dropout=0.0,
                         max_positions=16)
    pinyin_vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + PINYIN)
    hanzi_vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + HANZI)
    model = Transformer(config, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    return Converter(model, pinyin_vocab, hanzi_vocab)


def test_constrained_output_has_one_valid_character_per_syllable():
    for seed in range(5):
        converter = _untrained_converter(seed)
        tokens = ["ni", "hao", "，", "wo", "men", "bei", "jing", "ba", "1", "A", "。"]
        output = converter.convert_tokens([tokens])[0]
        assert len(output) == len(tokens)
        for token, char in zip(tokens, output):
            if token.isalpha() and token.islower():
                assert token in readings()[char], (token, char)
            else:
                assert char == token  # punctuation, digits, Latin pass through unchanged


def test_unconstrained_decoding_may_choose_anything_but_specials():
    converter = _untrained_converter()
    outputs = converter.convert_tokens([["ni", "hao"] * 4], constrained=False)
    assert len(outputs[0]) == 8 and all(char in HANZI for char in outputs[0])


def test_no_candidate_in_vocabulary_falls_back_to_the_reading_table():
    converter = _untrained_converter()
    output = converter.convert_tokens([["ni", "zhong", "€", "hao"]])[0]  # zhong, € never seen in training
    assert len(output) == 4 and output[2] == "€"
    assert "zhong" in readings()[output[1]]


def test_batching_and_order_do_not_change_results():
    converter = _untrained_converter()
    inputs = [["ni", "hao"], [], ["wo", "men", "bei", "jing", "ba", "。"], ["ba"]]
    one_by_one = [converter.convert_tokens([tokens])[0] for tokens in inputs]
    assert converter.convert_tokens(inputs, batch_size=2) == one_by_one
    assert one_by_one[1] == ""


def test_inputs_longer_than_the_model_are_decoded_in_pieces():
    converter = _untrained_converter()
    tokens = ["wo", "men"] * 20  # 40 > max_positions=16
    output = converter.convert_tokens([tokens])[0]
    assert len(output) == 40
    assert all(("wo" if i % 2 == 0 else "men") in readings()[c] for i, c in enumerate(output))


def test_convert_parses_typed_pinyin():
    converter = _untrained_converter()
    output = converter.convert(["nihao，wo3men2"])[0]
    assert len(output) == 5 and output[2] == "，"


def test_single_letter_syllables_may_also_be_latin_letters():
    converter = _untrained_converter()
    assert "o" in converter.candidates.candidates("o") and "哦" in converter.candidates.candidates("o")
    assert "ni" not in converter.candidates.candidates("ni")
