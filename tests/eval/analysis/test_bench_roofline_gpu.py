"""benchmarks/bench_roofline_gpu.py (issue 19.6) on the CPU with a toy Qwen3: it measures prefill and decode and
sets each beside the roofline's prediction for the same work (eval/analysis/roofline.py, presets.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
SMALL = {"name": "toy", "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
         "hidden_size": 32, "intermediate_size": 64, "vocab_size": 512, "tie_word_embeddings": False,
         "torch_dtype": "float32"}


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_roofline_gpu", REPO / "benchmarks" / "bench_roofline_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_roofline_gpu"] = module
    spec.loader.exec_module(module)
    return module


def test_each_row_is_measured_and_set_beside_the_roofline_of_the_same_work() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is absent (pip install torch)")
    pytest.importorskip("transformers", reason="transformers is absent (pip install transformers)")
    from arc_eval.analysis.presets import hardware_preset, model_from_config
    from arc_eval.analysis.roofline import decode_time

    module = bench()
    spec = model_from_config(SMALL, "toy")
    hardware = hardware_preset("h100-sxm")
    device = torch.device("cpu")
    model = module.build_model(SMALL, device, torch.float32)
    rows = module.measure(model, spec, hardware, device, [16, 48], [1, 3], steps=4, repeats=1)
    assert [(row.phase, row.prompt_tokens, row.batch) for row in rows] == [
        ("prefill", 16, 1), ("decode", 16, 1), ("decode", 16, 3),
        ("prefill", 48, 1), ("decode", 48, 1), ("decode", 48, 3)]
    for row in rows:
        assert row.measured_s > 0
        if row.phase == "prefill":
            assert row.predicted_s == spec.prefill_flops(row.prompt_tokens) / hardware.total_flops
        else:  # the weights once per step, each sequence's cache at the steps' mean context (p + 1 .. p + 4)
            context = row.prompt_tokens + 1 + (4 - 1) / 2
            streamed = spec.weight_bytes + row.batch * context * spec.kv_bytes_per_token
            assert row.work == streamed and row.predicted_s == decode_time(streamed, hardware)
        assert row.ratio == row.measured_s / row.predicted_s


def test_the_script_prints_the_table_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="PyTorch is absent (pip install torch)")
    pytest.importorskip("transformers", reason="transformers is absent (pip install transformers)")
    module = bench()
    module.TINY.update(SMALL)  # a smaller toy than the script's own, for speed
    assert module.main(["--device", "cpu", "--prompts", "8", "24", "--decode-batches", "2",
                        "--decode-steps", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "device: cpu" in out and "roofline: H100 SXM" in out and "the ratio on a CPU means nothing" in out
    table = [line.split() for line in out.splitlines() if re.match(r"(prefill|decode) ", line)]
    assert [row[:3] for row in table] == [["prefill", "8", "1"], ["decode", "8", "2"],
                                          ["prefill", "24", "1"], ["decode", "24", "2"]]
    assert all(float(row[3]) > 0 and float(row[4]) > 0 for row in table)


def test_bad_sizes_are_refused_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="PyTorch is absent (pip install torch)")
    pytest.importorskip("transformers", reason="transformers is absent (pip install transformers)")
    with pytest.raises(SystemExit) as refused:  # argparse's usage error (review h43)
        bench().main(["--device", "cpu", "--prompts", "0"])
    assert refused.value.code == 2
    assert "argument --prompts: expected an integer from 1 to" in capsys.readouterr().err


def test_timings_measured_elsewhere_get_the_same_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from arc_eval.analysis.presets import hardware_preset, model_preset

    module = bench()
    spec, hardware = model_preset("qwen3-8b"), hardware_preset("h100-sxm")
    rows = module.rows_from_lines("# note\nprefill 4096 1 0.14\ndecode 4096 8 0.079\npeak_gb 46\n", spec, hardware, 32)
    assert rows == [module.prefill_row(spec, hardware, 4096, 0.14), module.decode_row(spec, hardware, 4096, 8, 32, 0.079)]
    assert rows[0].predicted_s == spec.prefill_flops(4096) / hardware.total_flops
    recorded = REPO / "benchmarks" / "bench_roofline_gpu_h100.txt"
    assert module.main(["--measured", str(recorded)]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines() if re.match(r"(prefill|decode) ", line)]
    assert len(table) == 8 and all(float(row[5]) >= 1 for row in table)  # the roofline is a lower bound
