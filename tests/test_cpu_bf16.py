"""bf16 on a CPU without bf16 hardware: the ISA flags read from a /proc/cpuinfo file, and one
warning per setting from the drivers' --mixed_precision=bf16 and from a --serving_precision=bfloat16
export, never for a CPU with AVX512_BF16 or AMX, for a GPU, or when the flags cannot be read."""
import logging

import pytest
from absl import flags

from albert_tf import cpu_bf16

# Excerpts of /proc/cpuinfo as Linux writes them (tab before the colon), one processor each.
AVX2_ONLY = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC\n"
             "flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni vaes\n"
             "bugs\t\t: sysret_ss_attrs\n\nprocessor\t: 1\nflags\t\t: fpu avx512_bf16\n")
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni avx512_bf16\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    """Writes a cpuinfo file, makes it the module's default, and forgets earlier warnings."""
    monkeypatch.setattr(cpu_bf16, "_warned", set())

    def write(text: str) -> str:
        path = tmp_path / f"cpuinfo{len(list(tmp_path.iterdir()))}"
        path.write_text(text, encoding="utf-8")
        monkeypatch.setattr(cpu_bf16, "CPUINFO", str(path))
        return str(path)
    return write


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "bf16 hardware" in r.getMessage()]


def test_the_first_processors_flags_decide(cpuinfo):
    path = cpuinfo(AVX2_ONLY)
    assert {"avx2", "fma", "sha_ni"} <= cpu_bf16.cpu_flags(path) and "avx512_bf16" not in cpu_bf16.cpu_flags(path)
    assert cpu_bf16.cpu_has_bf16() is False
    assert cpu_bf16.cpu_has_bf16(cpuinfo(AVX512_BF16)) is True
    assert cpu_bf16.cpu_has_bf16(cpuinfo(AMX)) is True
    assert cpu_bf16.cpu_flags("/nonexistent/cpuinfo") is None
    assert cpu_bf16.cpu_has_bf16("/nonexistent/cpuinfo") is None


def test_one_warning_per_setting_on_a_cpu_without_bf16(cpuinfo, caplog):
    path = cpuinfo(AVX2_ONLY)
    caplog.set_level(logging.WARNING)
    assert cpu_bf16.warn_if_emulated("--mixed_precision=bf16") is True
    assert cpu_bf16.warn_if_emulated("--mixed_precision=bf16") is False
    assert cpu_bf16.warn_if_emulated("--serving_precision=bfloat16") is True
    messages = _warnings(caplog)
    assert len(messages) == 2 and path in messages[0] and "slower than float32" in messages[0]


@pytest.mark.parametrize("text,device", [(AVX512_BF16, "CPU"), (AMX, "CPU"), (AVX2_ONLY, "GPU"),
                                         (AVX2_ONLY, "TPU"), (None, "CPU")])
def test_no_warning_with_bf16_hardware_another_device_or_unknown_flags(cpuinfo, caplog, monkeypatch, text, device):
    if text is None:
        monkeypatch.setattr(cpu_bf16, "CPUINFO", "/nonexistent/cpuinfo")
    else:
        cpuinfo(text)
    caplog.set_level(logging.WARNING)
    assert cpu_bf16.warn_if_emulated("--mixed_precision=bf16", device) is False
    assert _warnings(caplog) == []


def test_the_drivers_strategy_warns_for_bf16_only(cpuinfo, caplog):
    from albert_tf.keras import keras
    from albert_tf.training import flags as shared_flags

    cpuinfo(AVX2_ONLY)
    caplog.set_level(logging.WARNING)
    try:
        for precision, warned in (("none", False), ("bf16", True)):
            values = flags.FlagValues()
            shared_flags.define_flags(values)
            values(["prog", f"--mixed_precision={precision}"])
            shared_flags.strategy_from_flags(values)
            assert any("--mixed_precision=bf16" in m for m in _warnings(caplog)) is warned
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_a_bfloat16_export_warns_a_float32_one_does_not(cpuinfo, caplog):
    from albert_tf.config import AlbertConfig
    from albert_tf.glue import heads
    from albert_tf.modeling.serving_precision import model_for_serving

    cpuinfo(AVX2_ONLY)
    caplog.set_level(logging.WARNING)
    model = heads.build_classifier(AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                                                num_attention_heads=2, intermediate_size=32,
                                                max_position_embeddings=16), "cola")
    model_for_serving(model, "float32")
    assert _warnings(caplog) == []
    model_for_serving(model, "bfloat16")
    assert ["--serving_precision=bfloat16" in m for m in _warnings(caplog)] == [True]
