"""Model and hardware presets of the roofline model, and user-defined ones from TOML/JSON files.

Model presets are *derived* from the values of the models' Hugging Face `config.json`
(layers, heads, sizes, vocabulary, tied embeddings, dtype); weight bytes, KV bytes per token and
FLOPs are computed from them (see `ModelSpec`), never typed in as totals. Checked values:

- Qwen/Qwen3-8B: num_hidden_layers 36, num_attention_heads 32, num_key_value_heads 8, head_dim 128,
  hidden_size 4096, intermediate_size 12288, vocab_size 151936, tie_word_embeddings false, bfloat16.
- Qwen/Qwen3-32B: num_hidden_layers 64, num_attention_heads 64, num_key_value_heads 8, head_dim 128,
  hidden_size 5120, intermediate_size 25600, vocab_size 151936, tie_word_embeddings false, bfloat16.

(Cross-checked against copies of both config.json files in public repositories, and against the
model cards' parameter counts: the derived totals are 8.19e9 (6.95e9 non-embedding) and
3.276e10 (3.12e10 non-embedding), the cards' "8.2B (6.95B non-embedding)" and "32.8B (31.2B)".)

Hardware presets use decimal units (1 GB = 1e9 bytes, 1 TB/s = 1e12 bytes/s, 1 TFLOP/s = 1e12):
H200 141 GB, 4.8 TB/s, 989 TFLOP/s dense BF16 (the paper's values); H100 SXM 80 GB, 3.35 TB/s,
989 TFLOP/s; MI300X 192 GB, 5.3 TB/s, 1300 TFLOP/s (the paper's rounding of AMD's 1307.4).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from arc_eval.analysis.errors import AnalysisError

GB = 1e9
TB = 1e12
TFLOPS = 1e12

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1, "fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}

# vLLM's default --gpu-memory-utilization is 0.9: the remaining 10 % of device memory is outside
# its pool. We reserve the same fraction as the roofline's scratch S unless told otherwise.
DEFAULT_SCRATCH_FRACTION = 0.10


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense decoder-only transformer (Qwen3 / Llama family: GQA, SwiGLU MLP, RMSNorm)."""

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    bytes_per_param: int = 2
    kv_bytes_per_element: int = 2
    qk_norm: bool = True  # Qwen3 normalises q and k per head (two RMSNorm vectors of head_dim)
    attention_bias: bool = False

    # --- parameter counts (per config.json; SwiGLU MLP = gate, up, down projections) ---------
    @property
    def attention_params_per_layer(self) -> int:
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        bias = (q + 2 * kv) if self.attention_bias else 0
        return h * q + 2 * h * kv + q * h + bias

    @property
    def mlp_params_per_layer(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)

    @property
    def matmul_params(self) -> int:
        """Weights of the per-token matrix multiplications in all layers (no norms, no embeddings)."""
        return self.num_hidden_layers * (self.attention_params_per_layer + self.mlp_params_per_layer)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        layers = self.num_hidden_layers * (
            self.attention_params_per_layer + self.mlp_params_per_layer + self.norm_params_per_layer
        )
        return layers + self.embedding_params + self.lm_head_params + self.hidden_size  # + final norm

    @property
    def non_embedding_params(self) -> int:
        return self.total_params - self.embedding_params - self.lm_head_params

    # --- roofline inputs ------------------------------------------------------------------
    @property
    def weight_bytes(self) -> float:
        """M_w: bytes of all weights, streamed once per decode step of a batch."""
        return float(self.total_params * self.bytes_per_param)

    @property
    def kv_bytes_per_token(self) -> float:
        """kv_b: K and V of every layer for one token: 2 x layers x kv_heads x head_dim x bytes."""
        return float(2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * self.kv_bytes_per_element)

    def prefill_flops_parts(self, prompt_tokens: int, cached_tokens: int = 0) -> tuple[float, float, float]:
        """(matmul, attention, lm_head) FLOPs of prefilling a prompt of p tokens, the first c of them cached.

        matmul    = 2 x matmul_params x (p - c)      (one multiply-add per weight per new token)
        attention = 2 x layers x heads x head_dim x (p (p + 1) - c (c + 1))
                    (QK^T and AV, 2 FLOPs per multiply-add each, over the causal query-key pairs of
                    the p - c new queries, each against every key before it and itself)
        lm_head   = 2 x hidden x vocab               (logits of the last position only)

        c = 0 is the paper's model (every call prefills its whole prompt); c > 0 is a server with
        prefix caching (vLLM's automatic prefix caching) reusing the KV of the first c tokens.
        """
        p = float(prompt_tokens)
        c = float(min(max(cached_tokens, 0), max(prompt_tokens - 1, 0)))  # the last token is always computed
        if p <= 0:
            return (0.0, 0.0, 0.0)
        matmul = 2.0 * self.matmul_params * (p - c)
        attention = (2.0 * self.num_hidden_layers * self.num_attention_heads * self.head_dim
                     * (p * (p + 1.0) - c * (c + 1.0)))
        lm_head = 2.0 * self.hidden_size * self.vocab_size
        return (matmul, attention, lm_head)

    def prefill_flops(self, prompt_tokens: int) -> float:
        return sum(self.prefill_flops_parts(prompt_tokens))


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """One accelerator type (per-device values) and how many of them serve the model."""

    name: str
    hbm_bytes: float
    bandwidth_bytes_per_s: float
    peak_flops: float
    n_gpu: int = 1
    scratch_bytes: float | None = None  # None: DEFAULT_SCRATCH_FRACTION of the total HBM

    @property
    def total_hbm_bytes(self) -> float:
        return self.n_gpu * self.hbm_bytes

    @property
    def total_bandwidth(self) -> float:
        return self.n_gpu * self.bandwidth_bytes_per_s

    @property
    def total_flops(self) -> float:
        return self.n_gpu * self.peak_flops

    @property
    def scratch(self) -> float:
        return self.scratch_bytes if self.scratch_bytes is not None else DEFAULT_SCRATCH_FRACTION * self.total_hbm_bytes


# config.json values of the two models the paper uses (see the module docstring)
QWEN3_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3-8b": {
        "name": "Qwen3-8B",
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "qwen3-32b": {
        "name": "Qwen3-32B",
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}

HARDWARE_PRESETS: dict[str, HardwareSpec] = {
    "h200": HardwareSpec("H200 (141 GB, 4.8 TB/s, 989 TFLOP/s)", 141 * GB, 4.8 * TB, 989 * TFLOPS),
    "h100-sxm": HardwareSpec("H100 SXM (80 GB, 3.35 TB/s, 989 TFLOP/s)", 80 * GB, 3.35 * TB, 989 * TFLOPS),
    "mi300x": HardwareSpec("MI300X (192 GB, 5.3 TB/s, 1300 TFLOP/s)", 192 * GB, 5.3 * TB, 1300 * TFLOPS),
}

_MODEL_KEYS_REQUIRED = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
)
_HARDWARE_KEYS = {"name", "hbm_gb", "bandwidth_tb_s", "peak_tflops", "n_gpu", "scratch_gb"}


def model_from_config(config: Mapping[str, Any], where: str, default_name: str = "model") -> ModelSpec:
    """A ModelSpec from config.json-style keys (a model's own config.json works as is)."""
    if "text_config" in config and "hidden_size" not in config and isinstance(config["text_config"], dict):
        config = config["text_config"]
    missing = [k for k in _MODEL_KEYS_REQUIRED if k not in config]
    if missing:
        raise AnalysisError(f"{where}: model definition lacks {', '.join(missing)} (config.json key names)")

    def positive_int(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise AnalysisError(f"{where}: '{key}' should be a positive integer, got {value!r}")
        return value

    ints = {k: positive_int(k, config[k]) for k in _MODEL_KEYS_REQUIRED if k != "tie_word_embeddings"}
    tie = config["tie_word_embeddings"]
    if not isinstance(tie, bool):
        raise AnalysisError(f"{where}: 'tie_word_embeddings' should be true or false, got {tie!r}")
    head_dim = config.get("head_dim")
    if head_dim is None:
        if ints["hidden_size"] % ints["num_attention_heads"]:
            raise AnalysisError(f"{where}: give 'head_dim' (hidden_size is not a multiple of num_attention_heads)")
        head_dim = ints["hidden_size"] // ints["num_attention_heads"]
    head_dim = positive_int("head_dim", head_dim)
    if "bytes_per_param" in config:
        bytes_per_param = positive_int("bytes_per_param", config["bytes_per_param"])
    else:
        dtype = config.get("torch_dtype", config.get("dtype", "bfloat16"))
        if not isinstance(dtype, str) or dtype.lower() not in DTYPE_BYTES:
            raise AnalysisError(
                f"{where}: unknown dtype {dtype!r}; use one of {', '.join(sorted(DTYPE_BYTES))} or give 'bytes_per_param'"
            )
        bytes_per_param = DTYPE_BYTES[dtype.lower()]
    kv_bytes = positive_int("kv_bytes_per_element", config.get("kv_bytes_per_element", bytes_per_param))
    name = config.get("name", default_name)
    return ModelSpec(
        name=str(name),
        num_hidden_layers=ints["num_hidden_layers"],
        num_attention_heads=ints["num_attention_heads"],
        num_key_value_heads=ints["num_key_value_heads"],
        head_dim=head_dim,
        hidden_size=ints["hidden_size"],
        intermediate_size=ints["intermediate_size"],
        vocab_size=ints["vocab_size"],
        tie_word_embeddings=tie,
        bytes_per_param=bytes_per_param,
        kv_bytes_per_element=kv_bytes,
        qk_norm=bool(config.get("qk_norm", True)),
        attention_bias=bool(config.get("attention_bias", False)),
    )


def _read_table(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise AnalysisError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: cannot be read ({exc})") from None
    try:
        data: Any = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise AnalysisError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except tomllib.TOMLDecodeError as exc:
        raise AnalysisError(f"{path}: not valid TOML ({exc}); use a .json name for JSON") from None
    if not isinstance(data, dict):
        raise AnalysisError(f"{path}: should hold a table/object of keys")
    return data


def model_preset(name_or_file: str) -> ModelSpec:
    """`qwen3-8b`, `qwen3-32b`, or a TOML/JSON file with config.json keys."""
    key = name_or_file.lower()
    if key in QWEN3_CONFIGS:
        return model_from_config(QWEN3_CONFIGS[key], f"preset {key}")
    path = Path(name_or_file)
    if path.suffix.lower() in (".toml", ".json") or path.exists():
        return model_from_config(_read_table(path), str(path), default_name=path.stem)
    raise AnalysisError(
        f"unknown model preset {name_or_file!r}: use {', '.join(QWEN3_CONFIGS)} or a .toml/.json file "
        "with config.json keys (num_hidden_layers, num_attention_heads, ...)"
    )


def hardware_preset(name_or_file: str, scratch_gb: float | None = None) -> HardwareSpec:
    """`h200`, `h100-sxm`, `mi300x`, or a TOML/JSON file (hbm_gb, bandwidth_tb_s, peak_tflops[, n_gpu, scratch_gb])."""
    key = name_or_file.lower()
    if key in HARDWARE_PRESETS:
        spec = HARDWARE_PRESETS[key]
    else:
        path = Path(name_or_file)
        if not (path.suffix.lower() in (".toml", ".json") or path.exists()):
            raise AnalysisError(
                f"unknown hardware {name_or_file!r}: use {', '.join(HARDWARE_PRESETS)} or a .toml/.json file "
                "with hbm_gb, bandwidth_tb_s, peak_tflops"
            )
        spec = hardware_from_table(_read_table(path), str(path), default_name=path.stem)
    if scratch_gb is not None:
        if not 0 <= scratch_gb * GB < spec.total_hbm_bytes:
            raise AnalysisError(f"--scratch-gb must be from 0 to below the {spec.total_hbm_bytes / GB:g} GB of HBM of "
                                f"{spec.name}, got {scratch_gb:g}")
        spec = HardwareSpec(
            spec.name, spec.hbm_bytes, spec.bandwidth_bytes_per_s, spec.peak_flops, spec.n_gpu, scratch_gb * GB
        )
    return spec


def hardware_from_table(table: Mapping[str, Any], where: str, default_name: str = "hardware") -> HardwareSpec:
    unknown = sorted(set(table) - _HARDWARE_KEYS)
    if unknown:
        raise AnalysisError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_HARDWARE_KEYS))}"
        )

    def positive(key: str) -> float:
        if key not in table:
            raise AnalysisError(f"{where}: '{key}' is required")
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise AnalysisError(f"{where}: '{key}' should be a positive number, got {value!r}")
        return float(value)

    n_gpu = table.get("n_gpu", 1)
    if isinstance(n_gpu, bool) or not isinstance(n_gpu, int) or n_gpu < 1:
        raise AnalysisError(f"{where}: 'n_gpu' should be a positive integer, got {n_gpu!r}")
    scratch = table.get("scratch_gb")
    if scratch is not None and (isinstance(scratch, bool) or not isinstance(scratch, (int, float)) or scratch < 0):
        raise AnalysisError(f"{where}: 'scratch_gb' should be a number >= 0, got {scratch!r}")
    return HardwareSpec(
        name=str(table.get("name", default_name)),
        hbm_bytes=positive("hbm_gb") * GB,
        bandwidth_bytes_per_s=positive("bandwidth_tb_s") * TB,
        peak_flops=positive("peak_tflops") * TFLOPS,
        n_gpu=n_gpu,
        scratch_bytes=None if scratch is None else float(scratch) * GB,
    )


_SIZE_PATTERNS = (
    ("qwen3-32b", re.compile(r"(?<![0-9.])32b(?![a-z0-9])", re.I)),
    ("qwen3-8b", re.compile(r"(?<![0-9.])8b(?![a-z0-9])", re.I)),
)


def preset_for_model_name(model: str) -> str | None:
    """'qwen3-8b' / 'qwen3-32b' when the served model name says 8B / 32B, else None."""
    for preset, pattern in _SIZE_PATTERNS:
        if pattern.search(model):
            return preset
    return None
