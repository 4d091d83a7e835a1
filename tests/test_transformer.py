import pytest
import torch

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.data.vocab import BOS_ID, PAD_ID
from pinyin_hanzi.models.transformer import (RESIDUAL_OUTPUTS, Transformer, model_values, shift_right,
                                             sinusoidal_table)

SOURCE_VOCAB, TARGET_VOCAB = 30, 40


def _model(seed=0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(**{"d_model": 32, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 64,
                            "dropout": 0.0, "max_positions": 64, **overrides})
    return Transformer(config, source_vocab_size=SOURCE_VOCAB, target_vocab_size=TARGET_VOCAB).eval()


def _ids(batch, length, vocab, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (batch, length), generator=generator)


def test_shift_right_puts_bos_first_and_drops_the_last_target():
    target = torch.tensor([[5, 6, 7], [8, 9, PAD_ID]])
    assert shift_right(target).tolist() == [[BOS_ID, 5, 6], [BOS_ID, 8, 9]]


@pytest.mark.parametrize("overrides", [{}, {"norm": "post", "tie_output": False}, {"n_encoder_layers": 1, "d_ff": 48, "max_positions": 20}])
def test_the_memory_check_counts_every_value_the_model_holds(overrides):
    model = _model(**overrides)  # what the check counts from the config alone, before building
    held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    assert model_values(model.config, source_vocab_size=SOURCE_VOCAB, target_vocab_size=TARGET_VOCAB) == held


def test_a_model_larger_than_memory_is_refused_before_it_is_allocated():
    from pinyin_hanzi.errors import ConfigError

    config = ModelConfig(d_model=8192, n_heads=8, d_ff=65536, n_encoder_layers=128, n_decoder_layers=128)
    with pytest.raises(ConfigError, match=r"would need 1\.4 TiB of parameters; this machine has "):
        Transformer(config, source_vocab_size=SOURCE_VOCAB, target_vocab_size=TARGET_VOCAB)


def test_sinusoidal_table_values():
    table = sinusoidal_table(10, 8)
    assert torch.allclose(table[0, 0::2], torch.zeros(4)) and torch.allclose(table[0, 1::2], torch.ones(4))
    assert torch.isclose(table[3, 0], torch.sin(torch.tensor(3.0)))
    assert torch.isclose(table[3, 3], torch.cos(torch.tensor(3.0 / 10000 ** (2 / 8))))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_look_ahead_mask_future_targets_do_not_change_earlier_outputs(norm):
    model = _model(norm=norm)
    source, target = _ids(2, 7, SOURCE_VOCAB), _ids(2, 7, TARGET_VOCAB, seed=2)
    changed = target.clone()
    changed[:, 4:] = _ids(2, 3, TARGET_VOCAB, seed=3)
    with torch.no_grad():
        before, after = model(source, target), model(source, changed)
    # Decoder input at position i is target[i-1], so outputs 0..4 see only target[:4].
    assert torch.allclose(before[:, :5], after[:, :5], atol=1e-5)
    assert not torch.allclose(before[:, 5:], after[:, 5:], atol=1e-3)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_extra_padding_does_not_change_outputs(norm):
    model = _model(norm=norm)
    source, target = _ids(1, 5, SOURCE_VOCAB), _ids(1, 5, TARGET_VOCAB, seed=2)
    padded_source = torch.cat([source, torch.full((1, 6), PAD_ID)], dim=1)
    padded_target = torch.cat([target, torch.full((1, 6), PAD_ID)], dim=1)
    with torch.no_grad():
        plain, padded = model(source, target), model(padded_source, padded_target)
    assert torch.allclose(plain, padded[:, :5], atol=1e-5)
    # and the source padding mask is what makes it so: real source tokens change the output
    noisy_source = padded_source.clone()
    noisy_source[:, 5:] = 7
    with torch.no_grad():
        assert not torch.allclose(plain, model(noisy_source, padded_target)[:, :5], atol=1e-3)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_cached_decoding_gives_the_uncached_logits_step_by_step_and_after_reordering(norm):
    model = _model(norm=norm)
    source, target = _ids(3, 6, SOURCE_VOCAB), _ids(3, 6, TARGET_VOCAB, seed=2)
    source[1, 4:] = PAD_ID  # one padded input: the cross-attention mask matters
    candidates = _ids(3 * 6, 5, TARGET_VOCAB, seed=3).view(3, 6, 5)
    decoder_input = shift_right(target)
    with torch.no_grad():
        memory, mask = model.encode(source)
        full = model.decode(decoder_input, memory, mask)  # (b, t, v), no cache
        restricted = model.decode(decoder_input, memory, mask, candidates=candidates)
        cache, steps = model.new_cache(), []
        for position in range(6):
            steps.append(model.decode(decoder_input[:, position : position + 1], memory, mask, cache=cache))
        assert cache.length == 6
        assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
        assert not torch.allclose(steps[1], steps[2], atol=1e-3)  # positions differ: the check has teeth
        cache = model.new_cache()
        for position in range(6):
            logits = model.decode(decoder_input[:, position : position + 1], memory, mask, cache=cache,
                                  candidates=candidates[:, position : position + 1])
            assert torch.allclose(logits, restricted[:, position : position + 1], atol=1e-5)
        # Beam search: rows of one input, each with its own prefix; reordering keeps each row's history.
        one, one_mask = memory[:1].expand(3, -1, -1), mask[:1].expand(3, -1, -1, -1)
        beams = model.decode(decoder_input, one, one_mask)  # (3, t, v): row r continues prefix r
        cache = model.new_cache()
        for position in range(3):
            model.decode(decoder_input[:, position : position + 1], one, one_mask, cache=cache)
        order = torch.tensor([2, 0, 2])
        cache.reorder(order)
        step = model.decode(decoder_input[order, 3:4], one, one_mask, cache=cache)
        assert torch.allclose(step, beams[order, 3:4], atol=1e-5)
        assert not torch.allclose(step, beams[:, 3:4], atol=1e-3)  # without the reorder it would differ


def test_a_cache_grown_from_one_row_per_input_to_several_keeps_each_inputs_memory():
    # A beam search's first step decodes one row per input, then continues with k rows each.
    model = _model()
    source = _ids(2, 5, SOURCE_VOCAB)
    source[1, 3:] = PAD_ID
    first = torch.full((2, 1), BOS_ID)
    following = _ids(6, 1, TARGET_VOCAB, seed=7)
    order = torch.tensor([0, 0, 0, 1, 1, 1])
    with torch.no_grad():
        memory, mask = model.encode(source)
        cache = model.new_cache()
        model.decode(first, memory, mask, cache=cache)
        cache.reorder(order)
        step = model.decode(following, memory[order], mask[order], cache=cache)
        expected = model.decode(torch.cat([first[order], following], dim=1), memory[order], mask[order])[:, 1:]
    assert torch.allclose(step, expected, atol=1e-5)
    assert not torch.allclose(step[:3], step[3:], atol=1e-3)  # the two inputs' memories differ


def test_cached_decoding_refuses_positions_past_max_positions_and_several_at_once():
    model = _model()
    memory, mask = model.encode(_ids(1, 3, SOURCE_VOCAB))
    cache = model.new_cache()
    cache.length = 64
    with pytest.raises(ValueError, match="max_positions"):
        model.decode(torch.tensor([[BOS_ID]]), memory, mask, cache=cache)
    with pytest.raises(ValueError, match="one position"):
        model.decode(torch.tensor([[BOS_ID, 5]]), memory, mask, cache=model.new_cache())


def test_logits_of_candidates_equal_the_full_logits_at_those_ids():
    model = _model()
    source, target = _ids(3, 6, SOURCE_VOCAB), _ids(3, 6, TARGET_VOCAB, seed=2)
    candidates = _ids(3 * 6, 5, TARGET_VOCAB, seed=3).view(3, 6, 5)  # (b, t, c)
    with torch.no_grad():
        memory, mask = model.encode(source)
        full = model.decode(shift_right(target), memory, mask)  # (b, t, v)
        restricted = model.decode(shift_right(target), memory, mask, candidates=candidates)  # (b, t, c)
    assert torch.allclose(restricted, full.gather(-1, candidates), atol=1e-5)


def test_output_projection_is_tied_to_the_target_embedding_when_configured():
    tied, untied = _model(tie_output=True), _model(tie_output=False)
    assert tied.output.weight.data_ptr() == tied.target_embedding.tokens.weight.data_ptr()
    assert untied.output.weight.data_ptr() != untied.target_embedding.tokens.weight.data_ptr()
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 32 * TARGET_VOCAB


def test_too_long_input_is_a_clear_error():
    with pytest.raises(ValueError, match="max_positions"):
        _model()(_ids(1, 65, SOURCE_VOCAB), _ids(1, 65, TARGET_VOCAB))


def test_attention_maps_are_distributions_that_respect_the_masks():
    model = _model()
    source = torch.cat([_ids(1, 5, SOURCE_VOCAB), torch.full((1, 2), PAD_ID)], dim=1)
    target = torch.cat([_ids(1, 5, TARGET_VOCAB, seed=2), torch.full((1, 2), PAD_ID)], dim=1)
    with torch.no_grad():
        plain = model(source, target)
    maps = model.attention_maps(source, target)
    assert [len(maps[kind]) for kind in ("encoder", "decoder", "cross")] == [2, 2, 2]
    cross, decoder, encoder = maps["cross"][0], maps["decoder"][1], maps["encoder"][0]
    assert cross.shape == (1, 4, 7, 7)
    for weights in (cross, decoder, encoder):
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    assert float(cross[..., 5:].abs().max()) == 0.0 and float(encoder[..., 5:].abs().max()) == 0.0  # padding
    assert float(decoder.triu(1).abs().max()) == 0.0  # look-ahead: nothing above the diagonal
    assert all(m.last_weights is None and not m.record for m in model.modules() if hasattr(m, "record"))
    for module in model.modules():  # the explicit path computes what the fused kernel computes
        if hasattr(module, "record"):
            module.record = True
    with torch.no_grad():
        explicit = model(source, target)
    assert torch.allclose(explicit[:, :5], plain[:, :5], atol=1e-5)


def test_every_submodule_runs_in_a_training_forward_pass():
    # The model holds no module only for its parameter names: in training (dropout > 0) each one is called.
    model = _model(dropout=0.1).train()
    called = set()
    for module in model.modules():
        module.register_forward_hook(lambda module, inputs, output: called.add(module))
    model(_ids(2, 5, SOURCE_VOCAB), _ids(2, 5, TARGET_VOCAB, seed=2))
    never_called = [name for name, module in model.named_modules() if module not in called
                    and not isinstance(module, torch.nn.ModuleList)]
    assert never_called == []


@pytest.mark.parametrize("tie_output", [True, False])
def test_weights_saved_under_the_old_feed_forward_names_load_into_the_named_layers(tie_output):
    # Checkpoints written before the feed-forward had named layers (the shipped model among them) call them
    # net.0 and net.3 (an nn.Sequential of Linear, ReLU, Dropout, Linear).
    trained, fresh = _model(tie_output=tie_output), _model(tie_output=tie_output, seed=5)
    old_names = {name.replace("feed_forward.expand.", "feed_forward.net.0.")
                 .replace("feed_forward.contract.", "feed_forward.net.3."): tensor
                 for name, tensor in trained.state_dict().items()}
    assert sum("feed_forward.net.3.weight" in name for name in old_names) == 4
    source, target = _ids(2, 5, SOURCE_VOCAB), _ids(2, 5, TARGET_VOCAB, seed=2)
    with torch.no_grad():
        assert not torch.allclose(fresh(source, target), trained(source, target), atol=1e-3)
        fresh.load_state_dict(old_names)
        assert torch.equal(fresh(source, target), trained(source, target))
    with pytest.raises(RuntimeError, match="feed_forward.net.1.weight"):  # other names are still refused
        fresh.load_state_dict({**old_names, "decoder_layers.0.feed_forward.net.1.weight": torch.zeros(1)})


def test_the_shipped_checkpoint_loads_and_converts_as_before(shipped_converter):
    from pinyin_hanzi.decoding.converter import SHIPPED_MODEL

    state = torch.load(SHIPPED_MODEL, weights_only=True)["model"]
    model = shipped_converter.model
    for name, tensor in state.items():
        renamed = name.replace("feed_forward.net.0.", "feed_forward.expand.").replace("feed_forward.net.3.",
                                                                                      "feed_forward.contract.")
        assert torch.equal(model.state_dict()[renamed], tensor.float()), name
    assert shipped_converter.convert("wo men ming tian jian") == "我们明天见"


@pytest.mark.parametrize("stack", ["encoder_layers", "decoder_layers"])
def test_a_pre_norm_layer_whose_residual_outputs_are_zero_is_the_identity(stack):
    # RESIDUAL_OUTPUTS names what growing a model deeper zeroes (training --init-from): the layer must then
    # pass its input through unchanged, and with any one of them left as it is, it must not.
    model = _model()
    layer = getattr(model, stack)[1]
    names = [name for name, _ in layer.named_parameters() if name.endswith(RESIDUAL_OUTPUTS)]
    assert len(names) == (4 if stack == "encoder_layers" else 6)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 4, 32)
    run = (lambda: layer(x, None)) if stack == "encoder_layers" else (lambda: layer(x, memory, None))
    with torch.no_grad():
        parameters = dict(layer.named_parameters())
        for name in names[:-2]:
            parameters[name].zero_()
        assert not torch.allclose(run(), x, atol=1e-3)  # the last projection still writes
        for name in names[-2:]:
            parameters[name].zero_()
        assert torch.equal(run(), x)
