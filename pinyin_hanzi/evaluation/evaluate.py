"""Scoring a converter's conversions: the score of a whole split or file typed as a user would
(:func:`evaluate_file`, ``translate.py --evaluate``), and two models compared on the same sentences
(:func:`compare_file`, ``translate.py --evaluate FILE --compare OTHER``). Validation during training is
:mod:`pinyin_hanzi.training.validation`: it needs no converter."""

from __future__ import annotations

import sys
from typing import Iterable, Sequence

from tqdm import tqdm

from pinyin_hanzi.evaluation.metrics import conversion_scores, edit_distance, paired_difference, typed
from pinyin_hanzi.progress import PlainProgress, bar_on

# Off a terminal (a log file), --evaluate says how far it is at most this often: a bar's redraws would bury
# the log, and a silent evaluation of many minutes looks hung.
PLAIN_PROGRESS_SECONDS = 30.0


def evaluate_file(converter, examples: Sequence, *, constrained: bool | None = True, unsegmented: bool = False,
                  beam: int | None = 1, batch_size: int = 256, abbreviate: float = 0.0, abbreviate_as: str = "initial",
                  prefixes: bool | str | None = None, fuzzy: Iterable[str] | None = None, shuangpin: str | None = None,
                  progress: bool = False) -> dict:
    """Scores of converting ``examples`` (corpus Examples) typed as a user would: syllables separated by
    spaces, or run together (``unsegmented``), with the share ``abbreviate`` (0..1) of syllables typed
    abbreviated (chosen by :func:`pinyin_hanzi.evaluation.metrics.abbreviated_positions`, the same for every run and
    engine), as their initial (``zh`` for zhong) or their first letter (``abbreviate_as="letter"``: ``z``).
    ``beam``, ``constrained``, ``fuzzy`` and ``shuangpin`` as ``Converter.convert_lines`` takes them (None: the
    converter's own); ``prefixes``: whether the converter reads abbreviations (None: yes when ``abbreviate`` >
    0, else the converter's own setting). Returns the settings used and the scores of
    :func:`pinyin_hanzi.evaluation.metrics.conversion_scores`, plus top1 (and top3, top5 from the 5-best list when
    beam >= 5): the share of sentences whose reference is among the k best conversions. ``progress``: a bar
    on stderr (sentences, rate, time left) while it converts where stderr is a terminal, else a plain line
    every PLAIN_PROGRESS_SECONDS. Raises ValueError for a share outside [0, 1]."""
    references = [e.hanzi for e in examples]
    settings = converter.search_settings(beam=beam, constrained=constrained)
    nbest = 5 if settings.beam >= 5 else 1
    prefixes = _reads_prefixes(converter, prefixes, abbreviate)
    found = _convert_typed(converter, examples, unsegmented, abbreviate, abbreviate_as,
                           "converting" if progress else None, beam=settings.beam, nbest=nbest,
                           constrained=settings.constrained, batch_size=batch_size, prefixes=prefixes, fuzzy=fuzzy,
                           shuangpin=shuangpin)
    scores = conversion_scores([conversions[0].text for conversions in found], references)
    for k in (1, 3, 5) if nbest == 5 else (1,):
        hits = sum(ref in [c.text for c in conversions[:k]] for conversions, ref in zip(found, references))
        scores[f"top{k}"] = hits / max(len(references), 1)
    return {"constrained": settings.constrained, "unsegmented": unsegmented, "beam": settings.beam,
            "abbreviate": abbreviate, **({"abbreviate_as": abbreviate_as} if abbreviate else {}), "prefixes": prefixes,
            **scores}


def compare_file(converter, other, examples: Sequence, *, constrained: bool | None = True, unsegmented: bool = False,
                 beam: int | None = 1, batch_size: int = 256, abbreviate: float = 0.0, abbreviate_as: str = "initial",
                 prefixes: bool | str | None = None, fuzzy: Iterable[str] | None = None, shuangpin: str | None = None,
                 resamples: int = 2000, progress: bool = False) -> dict:
    """``other`` against ``converter`` on the same ``examples``, typed alike and searched alike (arguments as
    in :func:`evaluate_file`; ``beam`` and ``constrained`` None: ``converter``'s own, for both; ``prefixes``
    None: on for abbreviated input, else each converter's own setting, as "auto" is each one's).
    Two CERs a tenth of a point apart on a thousand sentences may be noise; this says whether they are:
    returns the settings and :func:`pinyin_hanzi.evaluation.metrics.paired_difference` of the two (difference =
    other's CER - first's, with its 95% bootstrap interval over sentences). ``progress``: a bar per model, as
    :func:`evaluate_file` shows one."""
    references = [e.hanzi for e in examples]
    settings = converter.search_settings(beam=beam, constrained=constrained)
    errors = []
    for number, model in enumerate((converter, other), 1):
        label = f"model {number} of 2" if progress else None
        found = _convert_typed(model, examples, unsegmented, abbreviate, abbreviate_as, label, beam=settings.beam,
                               nbest=1, constrained=settings.constrained, batch_size=batch_size,
                               prefixes=_reads_prefixes(model, prefixes, abbreviate), fuzzy=fuzzy, shuangpin=shuangpin)
        errors.append([edit_distance(conversions[0].text, ref) for conversions, ref in zip(found, references)])
    return {"constrained": settings.constrained, "unsegmented": unsegmented, "beam": settings.beam,
            "abbreviate": abbreviate, **({"abbreviate_as": abbreviate_as} if abbreviate else {}),
            "sentences": len(references), "characters": sum(map(len, references)),
            **paired_difference(errors[0], errors[1], [len(ref) for ref in references], resamples=resamples)}


def _reads_prefixes(converter, prefixes: bool | str | None, abbreviate: float) -> bool:
    """Whether ``converter`` reads abbreviations: as ``prefixes`` says where given (True, False or a mode of
    decode.prefixes); else on for abbreviated input (it must be read as such), else the converter's own."""
    if prefixes is None and abbreviate > 0:
        return True
    return converter.typing_options(prefixes=prefixes).prefixes


def _convert_typed(converter, examples: Sequence, unsegmented: bool, abbreviate: float, abbreviate_as: str,
                   progress: str | None, **options):
    """The conversions of ``examples`` typed as :func:`pinyin_hanzi.evaluation.metrics.typed` types them, ``batch_size``
    sentences at a time, with progress labelled ``progress`` (None: none): a bar on a terminal, else a plain
    line every PLAIN_PROGRESS_SECONDS (a log file). ValueError for a share outside [0, 1] or an unknown
    abbreviation style."""
    lines = [typed(e.tokens, e.hanzi, unsegmented, abbreviate=abbreviate, abbreviate_as=abbreviate_as)
             for e in examples]
    step = options["batch_size"]  # converted in the same pieces with or without a bar: the same scores either way
    found = []
    plain = None
    if progress is not None and sys.stderr is not None and not bar_on(sys.stderr):
        plain = PlainProgress(len(lines), progress, "sentences", every=PLAIN_PROGRESS_SECONDS)
    with tqdm(total=len(lines), desc=progress, unit=" sentences", file=sys.stderr, dynamic_ncols=True,
              disable=progress is None or not bar_on(sys.stderr)) as bar:
        for begin in range(0, len(lines), step):
            found += converter.convert_lines(lines[begin : begin + step], **options)
            bar.update(min(step, len(lines) - begin))
            if plain is not None:
                plain.update(min(step, len(lines) - begin))
    return found
