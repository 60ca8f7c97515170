"""Write a tiny random-weight GGUF that llama.cpp's `llama-server` can serve: Qwen3's architecture at
toy size, Qwen's real vocabulary and merges, and Qwen3's real chat template.

    python benchmarks/make_tiny_gguf.py OUT.gguf [--tokenizer-dir ../shared/data/qwen3-tokenizer]
        [--llama-cpp DIR] [--layers 2] [--embd 64] [--heads 4] [--kv-heads 2] [--ff 128]
        [--context 32768] [--seed 0]

Its replies are garbage (the weights are random): it exists to run the harness end to end against
a real llama-server on a laptop without downloading a model (issue 8.2), where what matters is the
server's API, its template and its tokenizer, not the answers. Nothing is downloaded: the
vocabulary, merges, added tokens and template are read from the offline tokenizer directory
(Hugging Face layout: tokenizer.json, chat_template.jinja or tokenizer_config.json), and the GGUF
is written with llama.cpp's own `gguf-py` (from ``--llama-cpp DIR`` / ``$LLAMA_CPP_DIR``, or an
installed ``gguf`` package). The GGUF is a build output: never commit it.

Token types follow llama.cpp's Hugging Face converter: the tokenizer's special added tokens are
control tokens, its other added tokens (``<think>``, ``<tool_call>``...) user-defined, the rest
normal; the pre-tokenizer is "qwen2" (Qwen's split regex).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from arc_ref.options import integer_parser
from proofs_check.shared_data import QWEN3_NAME, shared_data_dir

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER_DIR = shared_data_dir() / QWEN3_NAME  # ../shared/data beside the repository, or $ARC_SHARED_DATA
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4  # gguf.TokenType values


def load_gguf(llama_cpp: str | None) -> Any:
    """llama.cpp's gguf-py: from DIR/gguf-py when given, else an installed `gguf`."""
    if llama_cpp:
        sys.path.insert(0, str(Path(llama_cpp) / "gguf-py"))
    try:
        return importlib.import_module("gguf")
    except ImportError:
        raise SystemExit(
            "make_tiny_gguf: llama.cpp's gguf-py is needed: pass --llama-cpp DIR (a llama.cpp "
            "source tree) or set LLAMA_CPP_DIR, or `pip install gguf`"
        ) from None


def read_tokenizer(directory: Path) -> tuple[list[str], list[int], list[str], dict[str, Any], str]:
    """(tokens by id, token types, merges "a b", tokenizer_config, chat template) of a HF directory."""
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise SystemExit(f"make_tiny_gguf: no tokenizer.json in {directory}")
    spec = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    model = spec["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"make_tiny_gguf: a byte-level BPE tokenizer is needed, got {model.get('type')}")
    by_id: dict[int, tuple[str, int]] = {index: (token, NORMAL) for token, index in model["vocab"].items()}
    for added in spec.get("added_tokens", []):
        by_id[int(added["id"])] = (added["content"], CONTROL if added.get("special") else USER_DEFINED)
    size = max(by_id) + 1
    missing = [index for index in range(size) if index not in by_id]
    if missing:
        raise SystemExit(f"make_tiny_gguf: token ids {missing[:5]}... are missing from {tokenizer_file}")
    tokens = [by_id[index][0] for index in range(size)]
    types = [by_id[index][1] for index in range(size)]
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model["merges"]]
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    template_file = directory / "chat_template.jinja"
    template = (
        template_file.read_text(encoding="utf-8") if template_file.is_file() else config.get("chat_template")
    )
    if not isinstance(template, str):
        raise SystemExit(f"make_tiny_gguf: no chat template in {directory}")
    return tokens, types, merges, config, template


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokenizer-dir", type=Path, default=DEFAULT_TOKENIZER_DIR)
    parser.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP_DIR"))
    parser.add_argument("--name", default="tiny-qwen3-random")
    size = integer_parser(1, 1_000_000)
    parser.add_argument("--layers", type=size, default=2)
    parser.add_argument("--embd", type=size, default=64)
    parser.add_argument("--heads", type=size, default=4)
    parser.add_argument("--kv-heads", type=size, default=2)
    parser.add_argument("--ff", type=size, default=128)
    parser.add_argument("--context", type=integer_parser(1, 2**31 - 1), default=32768,
                        help="the trained context (n_ctx_train)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.embd % args.heads or args.heads % args.kv_heads:
        parser.error("--embd must divide by --heads, and --heads by --kv-heads")
    if not (args.tokenizer_dir / "tokenizer.json").is_file():
        parser.error(f"--tokenizer-dir {str(args.tokenizer_dir)!r} holds no tokenizer.json")
    gguf = load_gguf(args.llama_cpp)
    tokens, types, merges, config, template = read_tokenizer(args.tokenizer_dir)
    ids = {token: index for index, token in enumerate(tokens)}

    def token_id(name: str, fallback: str) -> int:
        value = config.get(name) or fallback
        if isinstance(value, dict):
            value = value.get("content", fallback)
        return ids[value] if value in ids else ids[fallback]

    head_dim = args.embd // args.heads
    writer = gguf.GGUFWriter(str(args.out), arch="qwen3")
    writer.add_name(args.name)
    writer.add_context_length(args.context)
    writer.add_embedding_length(args.embd)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(1)  # mostly F16
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(token_id("bos_token", "<|endoftext|>"))
    writer.add_eos_token_id(token_id("eos_token", "<|im_end|>"))
    writer.add_pad_token_id(token_id("pad_token", "<|endoftext|>"))
    writer.add_add_bos_token(bool(config.get("add_bos_token", False)))
    writer.add_chat_template(template)

    rng = np.random.default_rng(args.seed)

    def weights(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    ones = np.ones
    writer.add_tensor("token_embd.weight", weights(len(tokens), args.embd))  # tied to the output
    writer.add_tensor("output_norm.weight", ones(args.embd, dtype=np.float32))
    kv = args.kv_heads * head_dim
    for layer in range(args.layers):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", ones(args.embd, dtype=np.float32))
        writer.add_tensor(f"{prefix}.attn_q.weight", weights(args.embd, args.embd))
        writer.add_tensor(f"{prefix}.attn_k.weight", weights(kv, args.embd))
        writer.add_tensor(f"{prefix}.attn_v.weight", weights(kv, args.embd))
        writer.add_tensor(f"{prefix}.attn_output.weight", weights(args.embd, args.embd))
        writer.add_tensor(f"{prefix}.attn_q_norm.weight", ones(head_dim, dtype=np.float32))
        writer.add_tensor(f"{prefix}.attn_k_norm.weight", ones(head_dim, dtype=np.float32))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", ones(args.embd, dtype=np.float32))
        writer.add_tensor(f"{prefix}.ffn_gate.weight", weights(args.ff, args.embd))
        writer.add_tensor(f"{prefix}.ffn_up.weight", weights(args.ff, args.embd))
        writer.add_tensor(f"{prefix}.ffn_down.weight", weights(args.embd, args.ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size = args.out.stat().st_size
    print(f"{args.out}: {args.name}, qwen3 architecture, {args.layers} layers x {args.embd} dims, "
          f"{len(tokens)} tokens, {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "make_tiny_gguf"))
