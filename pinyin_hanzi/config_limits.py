"""The range of every numeric config key (``LIMITS``), which config.py checks values against on load and the
tools check their options against (``--beam``, ``--lm-weight``, ...): a table of its own beside the
dataclasses whose comments document the keys."""

# The range of every numeric key, both ends included: a value outside it is an error naming the key and the
# range. Generous for any real experiment, but finite, so that no value makes a run allocate without bound,
# overflow an integer (train.seed reaches numpy's and torch's generators) or divide by infinity. train.lr
# may be absurd (1e30): a run that diverges stops with the non-finite-loss guard, not a crash.
LIMITS: dict[str, tuple[float, float]] = {
    "data.sources": (0, 100), "data.max_len": (2, 4096), "data.valid_per_mille": (1, 999),
    "data.test_per_mille": (1, 999), "data.min_char_count": (1, 10**9), "data.abbreviate": (0, 1),
    "model.d_model": (1, 8192), "model.n_heads": (1, 256), "model.n_encoder_layers": (1, 128),
    "model.n_decoder_layers": (1, 128), "model.d_ff": (1, 65536), "model.dropout": (0, 1),
    "model.max_positions": (1, 16384),
    "train.seed": (0, 2**32 - 1), "train.threads": (0, 256), "train.max_steps": (1, 10**9),
    "train.max_minutes": (0, 10**7), "train.batch_tokens": (1, 10**7), "train.grad_accum_steps": (1, 4096),
    "train.prefetch": (-1, 64), "train.length_bucket": (0, 4096),
    "train.max_bad_steps": (1, 10**6), "train.lr": (0, 1e30), "train.warmup_steps": (0, 10**9),
    "train.min_lr_ratio": (0, 1), "train.weight_decay": (0, 1000), "train.beta1": (0, 1), "train.beta2": (0, 1),
    "train.label_smoothing": (0, 1), "train.grad_clip": (0, 10**6), "train.log_every": (1, 10**9),
    "train.eval_every": (1, 10**9), "train.eval_sentences": (1, 10**6), "train.attention_sentences": (0, 100),
    "train.distill_weight": (0, 1), "train.distill_temperature": (0.05, 100),
    "decode.beam": (1, 64), "decode.prefix_beam": (1, 64), "decode.batch_sentences": (1, 65536), "decode.split_penalty": (0, 1000),
    "decode.abbreviation_penalty": (0, 1000),
    "decode.lm_weight": (0, 100), "decode.lm_order": (1, 4), "decode.lm_min_count": (1, 10**9),
    "decode.lm_max_ngrams": (0, 10**12),
    "decode.lm_phrases": (0, 1000), "decode.word_weight": (0, 100), "decode.word_min_frequency": (0, 1),
    "decode.word_contrast": (0, 1), "decode.reading_margin": (0, 1000), "decode.user_weight": (0, 100),
    "decode.history_weight": (0, 100), "decode.history_clauses": (1, 10**6),
}
