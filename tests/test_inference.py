import pytest
import torch

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.data.vocab import BOS_ID, PAD_ID
from pinyin_hanzi.models import inference, projections
from pinyin_hanzi.models.inference import InferenceDecoder
from pinyin_hanzi.models.transformer import Transformer, shift_right

SOURCE_VOCAB, TARGET_VOCAB = 30, 40
MODELS = [{}, {"norm": "post", "tie_output": False}]


def _model(**overrides) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(**{"d_model": 32, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 64,
                            "dropout": 0.1, "max_positions": 16, **overrides})
    return Transformer(config, source_vocab_size=SOURCE_VOCAB, target_vocab_size=TARGET_VOCAB).eval()


def _projections(decoder: InferenceDecoder) -> list:
    layer = decoder.layers[0]
    return [layer.self_attention.query_key_value, layer.self_attention.out, layer.cross_attention.query,
            layer.cross_attention.out, layer.expand, layer.contract]


def _ids(shape, vocab, seed):
    return torch.randint(4, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("overrides", MODELS)
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("matmul_rows", [64, 0])  # small steps' fused attention kernel; a batch's matmuls
def test_fast_cached_steps_give_the_book_models_uncached_logits_and_candidate_logits(overrides, padded, matmul_rows,
                                                                                      monkeypatch):
    monkeypatch.setattr(inference, "MATMUL_ATTENTION_ROWS", matmul_rows)
    model = _model(**overrides)
    source, decoder_input = _ids((3, 6), SOURCE_VOCAB, 1), shift_right(_ids((3, 6), TARGET_VOCAB, 2))
    if padded:
        source[1, 4:] = PAD_ID  # the cross-attention mask matters
    candidates = _ids((3, 6, 5), TARGET_VOCAB, 3)
    fast = InferenceDecoder(model)
    with torch.no_grad():
        memory, mask = model.encode(source)
        mask = mask if padded else None  # what the search passes when nothing is padded
        full = model.decode(decoder_input, memory, mask)  # (b, t, v): the book, uncached
        plain_cache, candidate_cache, book_cache = fast.new_cache(), fast.new_cache(), model.new_cache()
        for position in range(6):
            step_input = decoder_input[:, position : position + 1]  # (b, 1)
            logits = fast.decode(step_input, memory, mask, cache=plain_cache)  # (b, 1, v)
            assert torch.allclose(logits, full[:, position : position + 1], atol=1e-5)
            # the book's own cached path runs the same operations in the same order (but for oneDNN's
            # blocked weights, where this PyTorch has them, and matmul attention): the same values
            book = model.decode(step_input, memory, mask, cache=book_cache)
            assert torch.allclose(logits, book, atol=1e-5)
            if matmul_rows and all(projection.packed is None for projection in _projections(fast)):
                assert torch.equal(logits, book)  # to the bit
            listed = candidates[:, position : position + 1]  # (b, 1, c)
            restricted = fast.decode(step_input, memory, mask, cache=candidate_cache, candidates=listed)
            assert torch.allclose(restricted, full[:, position : position + 1].gather(-1, listed), atol=1e-5)
        assert plain_cache.length == 6
        assert not torch.allclose(full[:, 1], full[:, 2], atol=1e-3)  # positions differ: the checks have teeth


@pytest.mark.parametrize("overrides", MODELS)
@pytest.mark.parametrize("matmul_rows", [64, 0])
def test_fast_steps_follow_a_beam_search_from_one_row_to_reordered_beams_sharing_a_list(overrides, matmul_rows,
                                                                                        monkeypatch):
    monkeypatch.setattr(inference, "MATMUL_ATTENTION_ROWS", matmul_rows)
    # A beam search decodes <s> once per input, widens the cache to k rows, reorders it after every step, and
    # passes one candidate list per input for its k rows; the k rows of an input attend to its one row of
    # memory (the second input is padded: its mask is shared too).
    model = _model(**overrides)
    source = _ids((2, 5), SOURCE_VOCAB, 1)
    source[1, 3:] = PAD_ID
    prefixes = torch.cat([torch.full((6, 1), BOS_ID), _ids((6, 3), TARGET_VOCAB, 4)], dim=1)  # (n k, t), k = 3
    shared = _ids((2, 1, 6), TARGET_VOCAB, 5)  # (inputs, 1, c)
    fast = InferenceDecoder(model)
    with torch.no_grad():
        memory, mask = model.encode(source)
        full = model.decode(prefixes, memory.repeat_interleave(3, dim=0), mask.repeat_interleave(3, dim=0))
        cache = fast.new_cache()
        first = fast.decode(prefixes[::3, :1], memory, mask, cache=cache)  # (2, 1, v): <s> once per input
        assert torch.allclose(first, full[::3, :1], atol=1e-5)
        cache.reorder(torch.tensor([0, 0, 0, 1, 1, 1]))  # one row per input -> three
        for position in (1, 2):
            fast.decode(prefixes[:, position : position + 1], memory, mask, cache=cache)
        order = torch.tensor([2, 0, 2, 4, 3, 3])
        cache.reorder(order)
        step = fast.decode(prefixes[order, 3:4], memory, mask, cache=cache, candidates=shared)  # (n k, 1, c)
    assert cache.layers[0].memory_keys.shape[0] == 2  # the memory's keys were not copied per row
    expected = full[order, 3:4].gather(-1, shared.repeat_interleave(3, dim=0))
    assert torch.allclose(step, expected, atol=1e-5)
    assert not torch.allclose(step, full[:, 3:4].gather(-1, shared.repeat_interleave(3, dim=0)), atol=1e-3)


def test_fast_steps_refuse_several_positions_and_positions_past_max_positions():
    model = _model()
    fast = InferenceDecoder(model)
    memory, mask = model.encode(_ids((1, 3), SOURCE_VOCAB, 1))
    with pytest.raises(ValueError, match="one position"):
        fast.decode(torch.tensor([[BOS_ID, 5]]), memory, mask, cache=fast.new_cache())
    cache = fast.new_cache()
    cache.length = 16
    with pytest.raises(ValueError, match="max_positions=16"):
        fast.decode(torch.tensor([[BOS_ID]]), memory, mask, cache=cache)


def test_bf16_products_stay_close_to_fp32_and_a_step_of_one_row_stays_fp32_to_the_bit():
    model = _model()
    exact, low = InferenceDecoder(model), InferenceDecoder(model, bf16=True)
    # a product goes bf16 from about a million multiply-adds: this small model's from hundreds of rows
    enough = max(projection.bf16_rows for projection in _projections(low))
    for rows, bf16_used in ((enough, True), (1, False)):
        source, step_input = _ids((rows, 6), SOURCE_VOCAB, 1), _ids((rows, 1), TARGET_VOCAB, 2)
        with torch.no_grad():
            memory, _ = exact.encode(source)
            exact_cache, low_cache = exact.new_cache(), low.new_cache()
            reference = exact.decode(step_input, memory[:, :1], None, cache=exact_cache)  # one memory row
            logits = low.decode(step_input, memory[:, :1], None, cache=low_cache)
        assert logits.dtype == torch.float32
        assert torch.allclose(logits, reference, atol=0.05, rtol=0.02)
        assert torch.equal(logits, reference) != bf16_used  # bf16 where the rows repay it, and only there


@pytest.mark.parametrize("overrides", MODELS)
def test_the_fast_encoder_gives_the_book_models_memory_and_mask(overrides):
    model = _model(**overrides)
    fast = InferenceDecoder(model)
    for padded in (False, True):
        source = _ids((3, 7), SOURCE_VOCAB, 4)
        if padded:
            source[0, 3:] = PAD_ID
        with torch.no_grad():
            reference, reference_mask = model.encode(source)
            memory, mask = fast.encode(source)
        assert torch.equal(mask, reference_mask)
        real = mask[:, 0, 0]  # (b, s): padded positions' memory is never attended to
        assert torch.allclose(memory[real], reference[real], atol=1e-5)
    with pytest.raises(ValueError, match="max_positions=16"):
        fast.encode(_ids((1, 17), SOURCE_VOCAB, 1))


def _encoder_projections(decoder: InferenceDecoder) -> list:
    layer = decoder.encoder_layers[0]
    return [layer.self_attention.query_key_value, layer.self_attention.out, layer.expand, layer.contract]


def test_bf16_encoder_products_run_from_their_rows_and_give_fp32_memory_close_to_fp32():
    model = _model()
    exact, low = InferenceDecoder(model), InferenceDecoder(model, bf16=True)
    enough = max(projection.bf16_rows for projection in _encoder_projections(low))  # rows = inputs x tokens
    for inputs, bf16_used in ((-(-enough // 8), True), (1, False)):
        source = _ids((inputs, 8), SOURCE_VOCAB, 3)
        source[0, 5:] = PAD_ID
        with torch.no_grad():
            reference, mask = exact.encode(source)
            memory, low_mask = low.encode(source)
        assert memory.dtype == torch.float32 and torch.equal(mask, low_mask)
        assert torch.allclose(memory, reference, atol=0.05)
        assert torch.equal(memory, reference) != bf16_used


def test_a_batchs_self_attention_cache_is_bf16_and_a_search_keeps_its_first_steps_dtype():
    model = _model()
    exact, low = InferenceDecoder(model), InferenceDecoder(model, bf16=True)
    enough = max(projection.bf16_rows for projection in _projections(low))
    source, steps = _ids((enough, 6), SOURCE_VOCAB, 1), _ids((enough, 4), TARGET_VOCAB, 2)
    with torch.no_grad():
        memory, _ = exact.encode(source)
        exact_cache, low_cache = _steps_side_by_side(exact, low, memory, steps)
        assert low_cache.layers[0].keys.dtype == torch.bfloat16 and low_cache.layers[0].keys.shape[2] == 4
        assert exact_cache.layers[0].keys.dtype == torch.float32
        # a search of few inputs starts below MATMUL_ATTENTION_ROWS: its cache stays fp32 when its beams widen it
        small = low.new_cache()
        low.decode(steps[:2, :1], memory[:2], None, cache=small)
        small.reorder(torch.arange(2).repeat_interleave(enough // 2))
        low.decode(steps[: 2 * (enough // 2), 1:2], memory[:2], None, cache=small)
        assert small.layers[0].keys.dtype == torch.float32


def _steps_side_by_side(exact: InferenceDecoder, low: InferenceDecoder, memory: torch.Tensor, steps: torch.Tensor):
    """Decode ``steps`` (b, t) one position at a time with both decoders, checking that the bf16 one's fp32
    logits stay close to the exact ones at every step; their caches after the last."""
    exact_cache, low_cache = exact.new_cache(), low.new_cache()
    for position in range(steps.shape[1]):
        reference = exact.decode(steps[:, position : position + 1], memory, None, cache=exact_cache)
        logits = low.decode(steps[:, position : position + 1], memory, None, cache=low_cache)
        assert logits.dtype == torch.float32
        assert torch.allclose(logits, reference, atol=0.1, rtol=0.05)
    return exact_cache, low_cache


def test_a_bf16_cache_feeds_an_output_projection_that_stays_fp32_at_its_rows():
    # Products switch to bf16 at rows set by their size: here self-attention's stacked projection (3d x d) goes
    # bf16 at a third of the rows its output projection (d x d) does; between the two, the attention over the
    # bf16 cache meets an fp32 product.
    model = _model()
    exact, low = InferenceDecoder(model), InferenceDecoder(model, bf16=True)
    attention = low.layers[0].self_attention
    rows = attention.query_key_value.bf16_rows + 1
    assert max(rows, inference.MATMUL_ATTENTION_ROWS) < attention.out.bf16_rows
    source, steps = _ids((rows, 6), SOURCE_VOCAB, 1), _ids((rows, 2), TARGET_VOCAB, 2)
    with torch.no_grad():
        memory, _ = exact.encode(source)
        _, low_cache = _steps_side_by_side(exact, low, memory, steps)
    assert low_cache.layers[0].keys.dtype == torch.bfloat16


def test_int8_weights_serve_a_few_rows_close_to_fp32_and_leave_more_rows_to_bf16():
    model = _model(d_model=64, d_ff=128)  # int8 weights need ``in`` to be a multiple of INT8_IN_MULTIPLE
    exact, low = InferenceDecoder(model), InferenceDecoder(model, bf16=True)
    int8 = InferenceDecoder(model, bf16=True, int8=True)
    if int8.layers[0].expand.int8 is None:
        pytest.skip("this PyTorch build has no int8 weight kernel")
    assert all(projection.int8 is not None for projection in _projections(int8))
    assert all(projection.int8 is None for projection in _projections(low))
    assert not InferenceDecoder(model, int8=True).int8  # int8 weights come with bf16 inputs only
    for rows, int8_used in ((1, True), (projections.INT8_MAX_ROWS, True), (projections.INT8_MAX_ROWS + 1, False)):
        source, step_input = _ids((rows, 6), SOURCE_VOCAB, 1), _ids((rows, 1), TARGET_VOCAB, 2)
        with torch.no_grad():
            memory, _ = exact.encode(source)
            reference = exact.decode(step_input, memory[:, :1], None, cache=exact.new_cache())
            bf16_logits = low.decode(step_input, memory[:, :1], None, cache=low.new_cache())
            logits = int8.decode(step_input, memory[:, :1], None, cache=int8.new_cache())
        assert logits.dtype == torch.float32
        assert torch.allclose(logits, reference, atol=0.1, rtol=0.05)
        assert torch.equal(logits, bf16_logits) != int8_used  # int8 for a few rows, and only there


@pytest.mark.parametrize("overrides", MODELS)
@pytest.mark.parametrize("padded", [True, False])
def test_cross_attention_over_a_folded_memory_gives_the_unfolded_values_and_folds_one_input_only(overrides, padded,
                                                                                              monkeypatch):
    # The query and output projections folded into the memory (a single input's search) or run at every step:
    # the same logits, with and without a padding mask.
    model = _model(**overrides)
    source, steps = _ids((2, 5), SOURCE_VOCAB, 1), _ids((6, 3), TARGET_VOCAB, 2)
    source[1, 3:] = PAD_ID
    fast = InferenceDecoder(model)

    def run(inputs):
        with torch.no_grad():
            memory, mask = fast.encode(source[:inputs])
            mask = mask if padded else None
            cache = fast.new_cache()
            logits = [fast.decode(steps[: 3 * inputs : 3, :1], memory, mask, cache=cache)]
            cache.reorder(torch.arange(inputs).repeat_interleave(3))  # three rows per input share its memory
            logits += [fast.decode(steps[: 3 * inputs, t : t + 1], memory, mask, cache=cache) for t in (1, 2)]
        return logits, cache

    folded, cache = run(1)
    assert cache.layers[0].folded is not None and run(2)[1].layers[0].folded is None
    monkeypatch.setattr(inference, "FOLDED_MAX_INPUTS", 0)
    unfolded, cache = run(1)
    assert cache.layers[0].folded is None
    for a, b in zip(folded, unfolded):
        assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(folded[1][0], folded[1][1], atol=1e-3)  # the rows differ: the check has teeth
    monkeypatch.setattr(inference, "FOLDED_MAX_INPUTS", 2)  # a padded batch through the folded path
    together, cache = run(2)
    assert cache.layers[0].folded is not None
    monkeypatch.setattr(inference, "FOLDED_MAX_INPUTS", 0)
    for a, b in zip(together, run(2)[0]):
        assert torch.allclose(a, b, atol=1e-5)
