"""Measured prefill and decode of a random-weight Qwen3 against the roofline model's prediction (issue 19.6).

    python benchmarks/bench_roofline_gpu.py [--model qwen3-8b|qwen3-32b|tiny|FILE] [--hardware auto|h100-sxm|h200|FILE]
        [--prompts 4096 12288] [--decode-batches 1 8] [--decode-steps 32] [--repeats 3] [--device auto|cuda|cpu]

On any CUDA machine with PyTorch and transformers (no vLLM, no download): a Qwen3 of the preset's shape
(eval/analysis/presets.py; Qwen3-8B by default) is built with random bf16 weights on the GPU, then

- prefill: one forward pass over a prompt of p tokens (batch 1, logits of the last position only, as a server
  computes them), timed; predicted T_prefill = FLOPs_prefill(p) / peak FLOP/s (`ModelSpec.prefill_flops`, the
  roofline's prefill term, eq. 2);
- decode: ``--decode-steps`` steps of one token per sequence after a prompt of p tokens, at each batch size b (the
  KV cache repeated b times), timed per step; predicted = (M_w + b L kv_b) / bandwidth
  (`roofline.decode_time`: the weights streamed once per step, every sequence's KV cache once, eq. 1) with L the
  mean context of the steps (`roofline.mean_context`).

The prompts are an ARC-sized one (4096: a bounded view K) and a full-context one (12288 = L = 16384 - 4096, the
largest prompt the harness sends at the 8B preset). The table gives measured / predicted per row: the roofline is
a lower bound, so the ratio is >= 1, and how far above 1 it is says how much of the model's saving survives a real
kernel stack (eager PyTorch here, not vLLM's CUDA graphs and paged attention: decode at batch 1 pays kernel-launch
time the roofline does not count).

``--measured FILE`` prints the table for timings taken elsewhere (no torch needed): bench_roofline_gpu_h100.txt holds
one H100 run (2026-11-26, transformers 5.17 eager): prefill 2.2x the roofline (441-461 TFLOP/s of 989), decode at
batch 1-16 7.7-15x (70-104 ms per step, flat in the batch: Python and kernel launches, not HBM, bound eager decode).

On a machine without CUDA it runs on the CPU (``--model tiny`` by default there, float32) so a test covers it; the
prediction is then the chosen hardware's and the ratio says nothing about the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arc_eval.analysis.presets import (  # noqa: E402
    QWEN3_CONFIGS,
    HardwareSpec,
    ModelSpec,
    hardware_preset,
    model_from_config,
    model_preset,
)
from arc_eval.analysis.errors import AnalysisError  # noqa: E402
from arc_eval.analysis.roofline import decode_time, mean_context  # noqa: E402
from arc_ref.options import integer_parser  # noqa: E402

# a toy Qwen3 for the CPU test: Qwen3's vocabulary, two small layers (about 20 M parameters, float32)
TINY = {
    "name": "tiny-qwen3",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_size": 128,
    "intermediate_size": 256,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
ARC_PROMPT, FULL_PROMPT = 4096, 12288


@dataclasses.dataclass(frozen=True)
class Row:
    phase: str  # "prefill" or "decode"
    prompt_tokens: int
    batch: int
    measured_s: float  # prefill: the pass; decode: one step of the batch
    predicted_s: float
    work: float  # prefill: FLOPs; decode: bytes streamed per step

    @property
    def ratio(self) -> float:
        return self.measured_s / self.predicted_s

    def line(self) -> str:
        rate = (f"{self.work / self.measured_s / 1e12:8.1f} TFLOP/s" if self.phase == "prefill"
                else f"{self.work / self.measured_s / 1e9:8.1f} GB/s   ")
        return (f"{self.phase:8} {self.prompt_tokens:7d} {self.batch:5d} {self.measured_s * 1e3:12.4g} "
                f"{self.predicted_s * 1e3:12.4g} {self.ratio:9.3g}  {rate}")


def model_config(name: str) -> tuple[ModelSpec, dict[str, Any]]:
    """The ModelSpec of `name` and its config.json keys (preset, `tiny`, or a TOML/JSON file)."""
    if name == "tiny":
        return model_from_config(TINY, "tiny"), dict(TINY)
    spec = model_preset(name)
    keys = dict(QWEN3_CONFIGS.get(name.lower(), {}))
    if not keys:
        keys = {field.name: getattr(spec, field.name) for field in dataclasses.fields(spec)}
    return spec, keys


def pick_hardware(name: str, device_name: str) -> HardwareSpec:
    """`auto`: the preset matching the CUDA device's name (H200, H100), else H100 SXM's figures."""
    if name != "auto":
        return hardware_preset(name)
    return hardware_preset("h200" if "H200" in device_name.upper() else "h100-sxm")


def build_model(keys: dict[str, Any], device: Any, dtype: Any) -> Any:
    """A random-weight Qwen3ForCausalLM of the given shape, on `device`, in eval mode."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=keys["vocab_size"], hidden_size=keys["hidden_size"], intermediate_size=keys["intermediate_size"],
        num_hidden_layers=keys["num_hidden_layers"], num_attention_heads=keys["num_attention_heads"],
        num_key_value_heads=keys["num_key_value_heads"], head_dim=keys["head_dim"],
        tie_word_embeddings=keys["tie_word_embeddings"], max_position_embeddings=40960,
    )
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its own dtype: no float32 copy of 8 B parameters on the GPU
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.to(dtype).eval()


class Timer:
    def __init__(self, device: Any) -> None:
        import torch

        self.synchronize: Callable[[], None] = (
            torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        )

    def __call__(self, work: Callable[[], Any]) -> float:
        self.synchronize()
        started = time.perf_counter()
        work()
        self.synchronize()
        return time.perf_counter() - started


def prefill(model: Any, ids: Any) -> tuple[Any, Any]:
    """One pass over the prompt; the logits of its last position (a server's prefill). Returns (cache, logits)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    hidden = model.model(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state
    return cache, model.lm_head(hidden[:, -1:, :])


def repeat_cache(cache: Any, batch: int) -> Any:
    """The batch-1 cache repeated `batch` times (every sequence holds the same prompt)."""
    if batch == 1:
        return cache
    cache.batch_repeat_interleave(batch)
    return cache


def prefill_row(spec: ModelSpec, hardware: HardwareSpec, prompt: int, seconds: float) -> Row:
    """A prefill of `prompt` tokens beside T_prefill = FLOPs_prefill(p) / peak FLOP/s."""
    flops = spec.prefill_flops(prompt)
    return Row("prefill", prompt, 1, seconds, flops / hardware.total_flops, flops)


def decode_row(spec: ModelSpec, hardware: HardwareSpec, prompt: int, batch: int, steps: int, seconds: float) -> Row:
    """One decode step of `batch` sequences after `prompt` tokens beside (M_w + b L kv_b) / bandwidth, L the mean
    context of the `steps` steps timed (the first of them sees p + 1 tokens)."""
    context = mean_context(prompt + 1, steps)
    streamed = spec.weight_bytes + batch * context * spec.kv_bytes_per_token
    return Row("decode", prompt, batch, seconds, decode_time(streamed, hardware), streamed)


def rows_from_lines(text: str, spec: ModelSpec, hardware: HardwareSpec, steps: int) -> list[Row]:
    """Rows from lines ``prefill P 1 SECONDS`` / ``decode P B SECONDS_PER_STEP`` (``--measured``); others skipped."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if len(words) == 4 and words[0] in ("prefill", "decode"):
            try:
                prompt, batch, seconds = int(words[1]), int(words[2]), float(words[3])
            except ValueError:
                raise ValueError(f"line {number} of the timings, {line.strip()!r}: P and B must be integers, S a"
                                 " number") from None
            rows.append(prefill_row(spec, hardware, prompt, seconds) if words[0] == "prefill"
                        else decode_row(spec, hardware, prompt, batch, steps, seconds))
    return rows


def print_table(rows: list[Row]) -> None:
    print(f"{'phase':8} {'prompt':>7} {'batch':>5} {'measured ms':>12} {'roofline ms':>12} {'measured/':>9}  achieved")
    print(f"{'':8} {'':>7} {'':>5} {'':>12} {'':>12} {'roofline':>9}")
    for row in rows:
        print(row.line())


def measure(model: Any, spec: ModelSpec, hardware: HardwareSpec, device: Any, prompts: list[int],
            batches: list[int], steps: int, repeats: int) -> list[Row]:
    import torch

    timer = Timer(device)
    rows: list[Row] = []
    generator = torch.Generator(device="cpu").manual_seed(1)
    with torch.inference_mode():
        warm = torch.randint(0, spec.vocab_size, (1, 64), generator=generator).to(device)
        prefill(model, warm)  # kernels chosen, memory pools warmed
        for prompt in prompts:
            ids = torch.randint(0, spec.vocab_size, (1, prompt), generator=generator).to(device)
            times = [timer(lambda: prefill(model, ids)) for _ in range(repeats)]
            rows.append(prefill_row(spec, hardware, prompt, statistics.median(times)))
            for batch in batches:
                cache, logits = prefill(model, ids)
                cache = repeat_cache(cache, batch)
                token = logits.argmax(-1).expand(batch, 1).contiguous()

                def step() -> None:
                    nonlocal token
                    hidden = model.model(input_ids=token, past_key_values=cache, use_cache=True).last_hidden_state
                    token = model.lm_head(hidden[:, -1:, :]).argmax(-1)

                def decode() -> None:
                    for _ in range(steps):
                        step()

                step()  # the first step at this batch size warms its kernels
                total = timer(decode)
                rows.append(decode_row(spec, hardware, prompt, batch, steps, total / steps))
                del cache
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", help="qwen3-8b (default on CUDA), qwen3-32b, tiny (default on CPU), or a file")
    parser.add_argument("--hardware", default="auto", help="auto, h100-sxm, h200, mi300x, or a TOML/JSON file")
    count = integer_parser(1, 10_000_000)
    parser.add_argument("--prompts", type=count, nargs="+",
                        help=f"prompt sizes (default {ARC_PROMPT} {FULL_PROMPT}; each 1 to 10000000)")
    parser.add_argument("--decode-batches", type=count, nargs="+", default=[1, 8])
    parser.add_argument("--decode-steps", type=count, default=32)
    parser.add_argument("--repeats", type=count, default=3, help="prefill passes per prompt (median)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--measured", type=Path, help="print the table for timings measured elsewhere (lines "
                        "'prefill P 1 S' / 'decode P B S_PER_STEP', --decode-steps steps each), timing nothing")
    args = parser.parse_args(argv)
    if args.measured is not None:
        try:
            spec, _ = model_config(args.model or "qwen3-8b")
            hardware = hardware_preset("h100-sxm" if args.hardware == "auto" else args.hardware)
            text = args.measured.read_text(encoding="utf-8")
            rows = rows_from_lines(text, spec, hardware, args.decode_steps)
        except OSError as unreadable:
            parser.error(f"--measured {str(args.measured)!r} cannot be read: {unreadable.strerror or unreadable}")
        except (AnalysisError, ValueError) as refused:  # an unknown preset, a line whose numbers are not numbers
            parser.error(str(refused))
        if not rows:
            parser.error(f"--measured {str(args.measured)!r} holds no timing line ('prefill P 1 S' / 'decode P B S')")
        print(f"model: {spec.name}; roofline: {hardware.name}; timings from {args.measured}")
        print_table(rows)
        return 0
    try:
        import torch
        import transformers
    except ImportError as missing:
        print(f"bench_roofline_gpu: needs PyTorch and transformers ({missing})", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_roofline_gpu: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    on_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if on_cuda else "cpu")
    device_name = torch.cuda.get_device_name(device) if on_cuda else "cpu"
    spec, keys = model_config(args.model or ("qwen3-8b" if on_cuda else "tiny"))
    dtype = {2: torch.bfloat16, 4: torch.float32}.get(spec.bytes_per_param)
    if dtype is None:
        print(f"bench_roofline_gpu: {spec.bytes_per_param}-byte weights are not supported", file=sys.stderr)
        return 2
    hardware = pick_hardware(args.hardware, device_name)
    prompts = args.prompts or [ARC_PROMPT, FULL_PROMPT]
    if min(prompts) < 1 or min(args.decode_batches) < 1 or args.decode_steps < 1 or args.repeats < 1:
        print("bench_roofline_gpu: prompts, batches, steps and repeats must be positive", file=sys.stderr)
        return 2
    print(f"device: {device_name}; torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"model: {spec.name} with random weights ({spec.total_params / 1e9:.3f} B parameters, "
          f"{dtype}), M_w = {spec.weight_bytes / 1e9:.2f} GB, kv_b = {spec.kv_bytes_per_token / 1e3:.1f} kB/token")
    print(f"roofline: {hardware.name}" + ("" if on_cuda else "  (figures of that GPU: the ratio on a CPU means "
                                                             "nothing; this run checks the script)"))
    started = time.perf_counter()
    model = build_model(keys, device, dtype)
    print(f"built in {time.perf_counter() - started:.1f} s; prefill: median of {args.repeats}, decode: "
          f"{args.decode_steps} steps per row")
    rows = measure(model, spec, hardware, device, prompts, args.decode_batches, args.decode_steps, args.repeats)
    print_table(rows)
    if on_cuda:
        print(f"peak memory: {torch.cuda.max_memory_allocated(device) / 1e9:.1f} GB")
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_roofline_gpu"))
