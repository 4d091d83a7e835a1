import pytest
import torch

from pinyin_hanzi import runtime
from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.runtime import autocast_for, inference_precision, resolve_precision, select_device, set_threads


def test_precision_auto_is_bf16_on_cpus_with_native_bf16_only(monkeypatch):
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    assert [resolve_precision("auto", d) for d in (cpu, cuda, mps)] == ["bf16", "fp32", "fp32"]
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert [resolve_precision("auto", d) for d in (cpu, cuda, mps)] == ["fp32", "fp32", "fp32"]
    assert resolve_precision("bf16", cuda) == "bf16" and resolve_precision("bf16", cpu) == "bf16"
    assert resolve_precision("fp32", cpu) == "fp32"


def test_conversion_runs_as_asked_on_a_cpu_and_in_fp32_on_a_gpu(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    assert [inference_precision(p, cpu) for p in ("auto", "fp32", "bf16", "int8")] == ["int8", "fp32", "bf16", "int8"]
    assert {inference_precision(p, cuda) for p in ("auto", "fp32", "bf16", "int8")} == {"fp32"}
    monkeypatch.setattr(runtime.sys, "platform", "win32")  # MSVC builds: a scalar loop for int8 weights
    assert inference_precision("auto", cpu) == "bf16" and inference_precision("int8", cpu) == "int8"
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert inference_precision("auto", cpu) == "fp32" and inference_precision("int8", cpu) == "int8"


def test_autocast_multiplies_in_bf16_only_when_asked():
    cpu = torch.device("cpu")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast_for(cpu, "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast_for(cpu, "fp32"):
        assert (a @ b).dtype == torch.float32
    with autocast_for(cpu):
        assert (a @ b).dtype == torch.float32


def test_device_selection(monkeypatch):
    assert select_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runtime, "_mps_available", lambda: False)
    assert select_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="train.device=cuda but no CUDA device is available"):
        select_device("cuda")
    with pytest.raises(ConfigError, match="train.device=mps but MPS is not available"):
        select_device("mps")
    monkeypatch.setattr(runtime, "_mps_available", lambda: True)
    assert select_device("auto") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("auto") == torch.device("cuda")


def test_threads_zero_keeps_the_default():
    before = torch.get_num_threads()
    try:
        set_threads(0)
        assert torch.get_num_threads() == before
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_collector_is_paused_inside_and_as_it_was_after_even_on_errors():
    import gc

    from pinyin_hanzi.runtime import collector_paused

    assert gc.isenabled()
    with pytest.raises(KeyError):
        with collector_paused():
            assert not gc.isenabled()
            raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller that had paused it keeps it paused
    finally:
        gc.enable()


def test_startup_done_freezes_and_resumes_only_a_paused_collector():
    import gc

    from pinyin_hanzi.runtime import startup_done

    frozen = gc.get_freeze_count()
    startup_done()
    assert gc.isenabled() and gc.get_freeze_count() == frozen  # not paused: nothing changes
    gc.disable()
    try:
        kept = [object() for _ in range(10)], {"a": [1]}
        startup_done()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + 2 and kept
    finally:
        gc.unfreeze()
        gc.enable()
