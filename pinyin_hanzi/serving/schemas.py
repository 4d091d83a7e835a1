"""The HTTP service's request and response bodies as pydantic models: what FastAPI validates a request
against (a wrong type or value is a 422 naming the field) and the OpenAPI page (``/docs``) documents; and
the JSON of one conversion (:func:`conversion_body`)."""

from __future__ import annotations

from typing import Annotated, Literal, Sequence

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.fuzzy import fuzzy_pairs
from pinyin_hanzi.text.pieces import split_key
from pinyin_hanzi.text.pinyin import syllables as known_syllables
from pinyin_hanzi.text.shuangpin import layout_named

MAX_BEAM = 16  # beyond this a request costs seconds of the shared worker for no gain in accuracy
# A service limit, below the Converter's MAX_NBEST (config.py): a request's candidates widen the shared
# worker's beam as its beam does (the search keeps at least nbest).
MAX_REQUEST_NBEST = 10


class _Strict(BaseModel):
    # strict: "5" is not a beam and 1 is not a text; forbid: a misspelled field is an error, not ignored
    model_config = ConfigDict(extra="forbid", strict=True)


def _check_unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text holds a lone surrogate (\\ud800-\\udfff escape): not Unicode text") from None
    return text


Text = Annotated[str, AfterValidator(_check_unicode)]  # a str that is Unicode text (422 for a lone surrogate)


class ConvertRequest(_Strict):
    text: str | list[str] = Field(description="typed pinyin (e.g. 'ni hao', 'nihao', 'ni3hao3'), or a list of "
                                              "such texts, converted as one batch")
    beam: int | None = Field(None, ge=1, le=MAX_BEAM, description="beam size; default: the model's decode.beam")
    nbest: int = Field(5, ge=1, le=MAX_REQUEST_NBEST, description="how many distinct candidates to return per text")
    chinese_punctuation: bool = Field(False, description="ASCII , . ? ! after a hanzi become ，。？！")
    prefixes: bool | Literal["auto", "on", "off"] | None = Field(
        None, description="read letters that begin a syllable as any syllable they begin (bei j, wxqbj): "
                          "auto (on for a model trained with abbreviations), on, off; default: the model's")
    fuzzy: list[str] | None = Field(None, description="fuzzy pinyin pairs (z-zh, n-l, an-ang, ...); [] none; "
                                                      "default: the model's")
    shuangpin: str | None = Field(None, description="a double-pinyin layout (microsoft, xiaohe, ...); '' full "
                                                    "pinyin; default: the model's")

    @field_validator("text")
    @classmethod
    def _unicode(cls, text: str | list[str]) -> str | list[str]:
        for line in [text] if isinstance(text, str) else text:
            _check_unicode(line)
        return text

    @field_validator("fuzzy")
    @classmethod
    def _pairs(cls, fuzzy: list[str] | None) -> list[str] | None:
        return None if fuzzy is None else sorted(_known(fuzzy_pairs, fuzzy))

    @field_validator("shuangpin")
    @classmethod
    def _layout(cls, shuangpin: str | None) -> str | None:
        return _known(layout_named, shuangpin).name if shuangpin else shuangpin

    def typing(self) -> tuple[tuple[str, object], ...]:
        """The typing options the request sets, as ``convert_lines`` keywords (hashable: jobs with equal
        options share a decoding call); () where it sets none."""
        given = (("prefixes", self.prefixes), ("fuzzy", None if self.fuzzy is None else tuple(self.fuzzy)),
                 ("shuangpin", self.shuangpin))
        return tuple((name, value) for name, value in given if value is not None)


def _known(check, value):
    """``check(value)``; its DataError (an unknown fuzzy pair or layout) as the ValueError pydantic makes a 422."""
    try:
        return check(value)
    except DataError as error:
        raise ValueError(str(error)) from None


class AttentionRequest(_Strict):
    text: Text = Field(description="a conversion's characters, one per syllable")
    syllables: list[str] = Field(description="the syllables (model tokens) that text was read as")


class LearnRequest(_Strict):
    text: Text = Field(description="text the user committed (hanzi; punctuation and line ends cut it into "
                                   "clauses, and the clauses with a hanzi are learned)")


def _some_text(text: str) -> str:
    if not text:
        raise ValueError("'' would forget everything: send {} for that")
    return text


class ForgetRequest(_Strict):
    text: Annotated[Text, AfterValidator(_some_text)] | None = Field(
        None, description="forget the learned clauses holding this text; absent or null: everything")


class Learned(BaseModel):
    learned: list[str] = Field(description="the clauses learned (none where the text holds no hanzi)")
    clauses: int = Field(description="clauses in the user history now")


class Forgotten(BaseModel):
    forgotten: int = Field(description="clauses forgotten")
    clauses: int = Field(description="clauses in the user history now")


class Piece(BaseModel):
    reading: str = Field(description="the syllable (model token) this character converts")
    text: str = Field(description="the character it became")
    passthrough: bool = Field(description="true where the input passed through (letters, digits, "
                                          "punctuation, hanzi typed as they are), not a syllable converted")


class CandidateOut(BaseModel):
    text: str
    score: float = Field(description="log-probability under the model (higher is better)")
    syllables: list[str] = Field(description="the syllable each character was read as (an abbreviation or a "
                                             "fuzzy syllable as the full syllable it became)")
    segmentation: list[str] = Field(description="the model tokens of the reading it converts (what /attention "
                                                "takes as syllables)")
    pieces: list[Piece] = Field(description="syllable -> character, one per syllable")
    notes: list[str] = Field(description="fallbacks the converter used, if any")


class Conversion(BaseModel):
    input: str
    output: str = Field(description="the best candidate's text")
    candidates: list[CandidateOut] = Field(description="best first")


class BatchConversion(BaseModel):
    results: list[Conversion] = Field(description="one per input text, in order")


class Attention(BaseModel):
    chars: list[str] = Field(description="rows: the characters (decoder queries)")
    syllables: list[str] = Field(description="columns: the syllables (encoder keys)")
    layers: list[list[list[float]]] = Field(description="per decoder layer, heads averaged: chars x syllables, "
                                                        "each row sums to 1")


class WorkerState(BaseModel):
    kind: str = Field(description="process: the model runs in a process of its own; thread: in the server's")
    state: str = Field(description="ready, starting, dead (restarting after a crash) or stopped")
    pid: int | None = Field(description="the model process's id")
    restarts: int = Field(description="times the model process was restarted after a crash")


class Health(BaseModel):
    status: str = Field(description="ok, or unavailable (HTTP 503) while the model is not ready")
    error: str | None = Field(None, description="why the model is unavailable")
    checkpoint: str | None
    beam: int
    batching: bool
    workers: list[WorkerState] = Field(description="the model processes (or the one model thread)")
    calls: int = Field(description="convert_lines calls made so far (all workers)")
    lines: int = Field(description="texts converted so far")
    largest_call: int = Field(description="most texts converted in one call")
    decoding: int = Field(description="texts in the calls in progress")
    learned: int = Field(description="clauses in the user history (POST /learn)")


def _pieces(candidate) -> list[dict]:
    """One piece per syllable: what it was read as, the character it became, and whether the input passed
    through as itself; none where text and readings do not pair up one to one."""
    readings = candidate.read_as or candidate.syllables
    if len(candidate.text) != len(readings):
        return []
    # a toned reading (ni3, typed with its tone) is a syllable converted too
    return [{"reading": reading, "text": char,
             "passthrough": reading == char or split_key(reading)[0] not in known_syllables()}
            for reading, char in zip(readings, candidate.text)]


def conversion_body(line: str, candidates: Sequence) -> dict:
    return {"input": line, "output": candidates[0].text if candidates else "",
            "candidates": [{"text": c.text, "score": float(c.score), "syllables": list(c.read_as or c.syllables),
                            "segmentation": list(c.syllables), "pieces": _pieces(c), "notes": list(c.notes)}
                           for c in candidates]}
