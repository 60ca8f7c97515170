"""benchmarks/vllm_cpu's pieces that run without vLLM: the tiny Qwen3 models (make_tiny_qwen3.py) answer as
rigged under transformers' own Qwen3 and Qwen's real template, and requirements_of.py lists what vllm-cpu needs
beside torch. The real server is checked by benchmarks/vllm_cpu/run.sh (CI's real-vLLM step)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

REPO = Path(__file__).resolve().parents[3]
QWEN3 = qwen3_dir()
TOOL_ANSWER = '<tool_call>{"name": "cat", "arguments": {"file":"secrets.txt"}}</tool_call>'


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "vllm_cpu" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_the_bigram_model_answers_its_text_to_every_prompt_greedy_or_sampled(tmp_path: Path) -> None:
    answer = "cat secrets.txt"
    torch = pytest.importorskip("torch", reason="PyTorch is absent (pip install torch)")
    transformers = pytest.importorskip("transformers", reason="transformers is absent (pip install transformers)")
    assert QWEN3 is not None
    load("make_tiny_qwen3").write_model(tmp_path / "model", Path(QWEN3), answer, seed=0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    conversations = [
        [{"role": "user", "content": "hello " * 300}],
        [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"},
         {"role": "assistant", "content": "ls"}, {"role": "user", "content": "a.txt\nsecrets.txt"}],
    ]
    torch.manual_seed(0)
    for messages in conversations:
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                               enable_thinking=False)
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        for sampled in (False, True):
            out = model.generate(ids, max_new_tokens=40, do_sample=sampled, temperature=1.0 if sampled else None,
                                 top_k=None, top_p=None)
            assert tokenizer.decode(out[0, ids.shape[1]:]) == answer + "<|im_end|>"


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_a_repeated_token_offers_every_successor_the_later_ones_first(tmp_path: Path) -> None:
    """The tool call repeats '":' and 'Ġ"': vLLM's grammar forces the envelope's earlier successors, and where
    the grammar leaves the choice free (the name, the arguments) the model's ranking decides."""
    torch = pytest.importorskip("torch", reason="PyTorch is absent (pip install torch)")
    transformers = pytest.importorskip("transformers", reason="transformers is absent (pip install transformers)")
    assert QWEN3 is not None
    module = load("make_tiny_qwen3")
    module.write_model(tmp_path / "model", Path(QWEN3), TOOL_ANSWER, seed=0)
    chain, end_of_turn = module.answer_chain(Path(QWEN3), TOOL_ANSWER)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    successors: dict[int, list[int]] = {}
    for token, following in zip(chain, [*chain[1:], end_of_turn]):
        successors.setdefault(token, []).append(following)
    assert any(len(following) > 1 for following in successors.values())
    with torch.inference_mode():
        for token, following in successors.items():
            logits = model(input_ids=torch.tensor([[1, 2, token]])).logits[0, -1]
            offered = (logits > 1).nonzero().flatten().tolist()
            assert sorted(offered) == sorted(following)  # every successor, nothing else
            ranked = sorted(following, key=lambda candidate: -float(logits[candidate]))
            assert ranked == following[::-1]  # the later occurrence's successor first


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_an_answer_that_repeats_a_token_pair_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is absent (pip install transformers)")
    assert QWEN3 is not None
    with pytest.raises(SystemExit, match="a token pair repeats"):
        load("make_tiny_qwen3").answer_chain(Path(QWEN3), "cat secrets.txt; cat secrets.txt")


def test_requirements_of_keeps_what_applies_here_and_leaves_out_the_names_given() -> None:
    pytest.importorskip("pip", reason="pip is absent")
    requirements = load("requirements_of").applicable_requirements("arc-ref", {"pyrsistent"})
    names = [line.split("<")[0].split(">")[0].split("=")[0].split("!")[0] for line in requirements]
    assert "attrs" in names and "jinja2" in names and "pyrsistent" not in names
    assert not any("extra" in line for line in requirements)  # the extras' requirements do not apply
