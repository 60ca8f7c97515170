"""Model and hardware presets: built-in, from TOML/JSON files, and the errors users get."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arc_eval.analysis.errors import AnalysisError
from arc_eval.analysis.presets import (
    DEFAULT_SCRATCH_FRACTION,
    GB,
    HARDWARE_PRESETS,
    hardware_preset,
    model_preset,
    preset_for_model_name,
)

PRESET_DIR = Path(__file__).resolve().parents[3] / "eval" / "analysis" / "presets"


def test_shipped_example_files_equal_the_builtin_presets() -> None:
    assert model_preset(str(PRESET_DIR / "qwen3-8b.json")) == model_preset("qwen3-8b")
    assert model_preset(str(PRESET_DIR / "qwen3-32b.toml")) == model_preset("QWEN3-32B")


def test_hardware_presets_are_the_papers_values() -> None:
    h200 = hardware_preset("h200")
    assert (h200.hbm_bytes, h200.bandwidth_bytes_per_s, h200.peak_flops) == (141e9, 4.8e12, 989e12)
    mi = hardware_preset("MI300X")
    assert (mi.hbm_bytes, mi.bandwidth_bytes_per_s, mi.peak_flops) == (192e9, 5.3e12, 1300e12)
    h100 = HARDWARE_PRESETS["h100-sxm"]
    assert (h100.hbm_bytes, h100.bandwidth_bytes_per_s, h100.peak_flops) == (80e9, 3.35e12, 989e12)
    assert h200.scratch == pytest.approx(DEFAULT_SCRATCH_FRACTION * 141e9)
    assert hardware_preset("h200", scratch_gb=5).scratch == 5 * GB


def test_multi_gpu_hardware_file() -> None:
    hw = hardware_preset(str(PRESET_DIR / "h200x2.toml"))
    assert hw.n_gpu == 2 and hw.total_hbm_bytes == 282e9 and hw.total_bandwidth == 9.6e12 and hw.total_flops == 1978e12


def test_a_models_own_config_json_works(tmp_path: Path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "rope_theta": 500000.0,
        "qk_norm": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = model_preset(str(path))
    assert spec.head_dim == 128 and spec.bytes_per_param == 4 and spec.kv_bytes_per_element == 4
    assert spec.name == "config"
    # Llama-3.1-8B: 8.03e9 parameters
    assert round(spec.total_params / 1e9, 2) == 8.03


@pytest.mark.parametrize(
    "content,message",
    [
        ({"num_hidden_layers": 2}, "lacks num_attention_heads"),
        (
            {**json.loads((PRESET_DIR / "qwen3-8b.json").read_text()), "tie_word_embeddings": "no"},
            "tie_word_embeddings",
        ),
        ({**json.loads((PRESET_DIR / "qwen3-8b.json").read_text()), "num_hidden_layers": 0}, "positive integer"),
        ({**json.loads((PRESET_DIR / "qwen3-8b.json").read_text()), "torch_dtype": "int3"}, "unknown dtype"),
    ],
)
def test_bad_model_files_get_clear_messages(tmp_path: Path, content: dict[str, object], message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(content))
    with pytest.raises(AnalysisError, match=message):
        model_preset(str(path))


def test_bad_hardware_files_get_clear_messages(tmp_path: Path) -> None:
    bad = tmp_path / "hw.toml"
    bad.write_text("hbm_gb = 80\nbandwidth_tb_s = 2\npeak_tflop = 100\n")
    with pytest.raises(AnalysisError, match="unknown key.*peak_tflop"):
        hardware_preset(str(bad))
    bad.write_text("hbm_gb = 80\nbandwidth_tb_s = 2\n")
    with pytest.raises(AnalysisError, match="'peak_tflops' is required"):
        hardware_preset(str(bad))
    bad.write_text("hbm_gb = -1\nbandwidth_tb_s = 2\npeak_tflops = 1\n")
    with pytest.raises(AnalysisError, match="'hbm_gb' should be a positive number"):
        hardware_preset(str(bad))
    bad.write_text("hbm_gb = [\n")
    with pytest.raises(AnalysisError, match="not valid TOML"):
        hardware_preset(str(bad))
    with pytest.raises(AnalysisError, match="no such file"):
        hardware_preset(str(tmp_path / "absent.toml"))
    with pytest.raises(AnalysisError, match="unknown hardware 'b200'"):
        hardware_preset("b200")
    with pytest.raises(AnalysisError, match="unknown model preset 'llama'"):
        model_preset("llama")
    with pytest.raises(AnalysisError, match="scratch"):
        hardware_preset("h200", scratch_gb=-1)


@pytest.mark.parametrize(
    "name,preset",
    [
        ("Qwen/Qwen3-8B", "qwen3-8b"),
        ("qwen3-8b-instruct", "qwen3-8b"),
        ("Qwen/Qwen3-32B", "qwen3-32b"),
        ("/models/Qwen3-32B-FP8", "qwen3-32b"),
        ("Qwen3-38B", None),
        ("Qwen2.8B", None),
        ("scripted", None),
    ],
)
def test_preset_from_the_served_model_name(name: str, preset: str | None) -> None:
    assert preset_for_model_name(name) == preset
