"""Write a tiny Qwen3 model directory that vLLM can serve, offline: Qwen3's architecture at toy size, Qwen's real
tokenizer files and chat template (from ../shared/data/qwen3-tokenizer), random or rigged weights.

    python make_tiny_qwen3.py OUT_DIR [--answer "cat secrets.txt"] [--tokenizer-dir DIR] [--seed 0]

Without ``--answer`` the weights are random (replies are garbage): what is exercised is the server's API, its
template and its tokenizer. With ``--answer TEXT`` the model is a bigram machine that answers TEXT to every
prompt, whatever it holds: every layer's attention and MLP outputs are zero (``o_proj``, ``down_proj``), so the
last position's hidden state is its token's embedding; the embeddings of the generation prompt's last token and
of TEXT's distinct tokens are distinct one-hot vectors, and ``lm_head`` maps each of them to the token that follows
it (TEXT's last token to ``<|im_end|>``, the end of the turn) with a logit of 128 or more against 0 for every other
token. When every token of TEXT is distinct, decoding, greedy or sampled, always writes TEXT. A token that repeats
gets every one of its successors, the later ones with larger logits (128, 144, ...): free decoding takes the last,
and a grammar that forces the earlier ones allows only them. That is how a tool call passes vLLM 0.32's grammar for
``parallel_tool_calls: false`` (the envelope ``{"name": "`` NAME ``", "arguments": `` forced, the name and the
arguments free): after ``":`` the name's ``Ġ"`` is forced and the arguments' ``Ġ{"`` free. Then, so a harness
run against it takes the same action at every step and its tasks store, compact, summarize and overflow.

Needs torch, transformers and safetensors (the vLLM environment has them); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # proofs_check, also from vLLM's own interpreter (last: it shadows no other import)
from proofs_check.shared_data import QWEN3_NAME, shared_data_dir  # noqa: E402

DEFAULT_TOKENIZER_DIR = shared_data_dir() / QWEN3_NAME  # ../shared/data beside the repository, or $ARC_SHARED_DATA
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
END_OF_TURN = "<|im_end|>"
HIDDEN = 64  # one-hot room for the generation prompt's last token and the answer's tokens
SUCCESSOR_LOGIT = 128.0  # every other logit is 0: the answer wins even when sampled at temperature 1


def tiny_config(tokenizer_config: dict[str, Any], end_of_turn: int, tied: bool) -> dict[str, Any]:
    """config.json of a 2-layer Qwen3 with Qwen3's vocabulary size (151936) and its own window of 32768."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": end_of_turn,
        "pad_token_id": tokenizer_config.get("pad_token_id"),
        "use_cache": True,
    }


def answer_chain(tokenizer_dir: Path, answer: str) -> tuple[list[int], int]:
    """[last token of the generation prompt, answer tokens...] and the id of <|im_end|>.

    The generation prompt is read from Qwen3's template with thinking off, the way the harness sends every
    request, so the chain starts where every reply starts.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    answer_ids = tokenizer.encode(answer, add_special_tokens=False)
    end_of_turn = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    chain = [prompt_ids[-1], *answer_ids]
    successors = {(token, following) for token, following in zip(chain, [*chain[1:], end_of_turn])}
    if chain.count(prompt_ids[-1]) > 1 or end_of_turn in chain or len(successors) != len(chain):
        raise SystemExit(
            f"make_tiny_qwen3: a bigram model cannot answer {answer!r}: in "
            f"{tokenizer.convert_ids_to_tokens(chain)} the prompt's last token or a token pair repeats"
        )
    if len(set(chain)) > HIDDEN:
        raise SystemExit(f"make_tiny_qwen3: {answer!r} has {len(set(answer_ids))} distinct tokens; at most "
                         f"{HIDDEN - 1} fit")
    return chain, int(end_of_turn)


def rig_bigram(state: dict[str, Any], chain: list[int], end_of_turn: int) -> None:
    """Make `state` (a Qwen3ForCausalLM state dict) map chain[i] to chain[i + 1] and the last one to <|im_end|>."""
    import torch

    for name, tensor in state.items():
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            tensor.zero_()  # each layer adds nothing to the residual stream
    embed = state["model.embed_tokens.weight"]
    head = state["lm_head.weight"]
    embed.zero_()
    head.zero_()
    slots: dict[int, int] = {}
    seen: dict[int, int] = {}
    for token, successor in zip(chain, [*chain[1:], end_of_turn]):
        slot = slots.setdefault(token, len(slots))
        embed[token, slot] = 1.0
        logit = SUCCESSOR_LOGIT + 16.0 * seen.get(token, 0)  # a repeated token's later successors rank higher
        seen[token] = seen.get(token, 0) + 1
        head[successor, slot] = logit / HIDDEN**0.5  # the final RMSNorm scales a one-hot by sqrt(64)
    state["model.norm.weight"].copy_(torch.ones_like(state["model.norm.weight"]))


def write_model(out: Path, tokenizer_dir: Path, answer: str | None, seed: int) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    missing = [name for name in TOKENIZER_FILES[:2] if not (tokenizer_dir / name).is_file()]
    if missing:
        raise SystemExit(f"make_tiny_qwen3: {tokenizer_dir} lacks {', '.join(missing)} (Qwen's tokenizer files)")
    tokenizer_config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    chain, end_of_turn = answer_chain(tokenizer_dir, answer) if answer is not None else ([], 151645)
    config = tiny_config(tokenizer_config, end_of_turn, tied=answer is None)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**config)).to(torch.float32)
    state = {name: tensor.detach().clone().contiguous() for name, tensor in model.state_dict().items()}
    if answer is not None:
        rig_bigram(state, chain, end_of_turn)
    elif "lm_head.weight" in state:
        del state["lm_head.weight"]  # tied: vLLM reads the embedding
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    generation = {"eos_token_id": end_of_turn, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out / name)
    parameters = sum(tensor.numel() for tensor in state.values())
    kind = f"bigram answering {answer!r}" if answer is not None else "random"
    print(f"make_tiny_qwen3: wrote {out} ({kind}, {parameters / 1e6:.1f} M parameters)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out", type=Path, help="the model directory to write")
    parser.add_argument("--answer", help="rig the model to answer this text to every prompt (default: random)")
    parser.add_argument("--tokenizer-dir", type=Path, default=DEFAULT_TOKENIZER_DIR)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_model(args.out, args.tokenizer_dir, args.answer, args.seed)
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "make_tiny_qwen3"))
