"""Every prompt the evaluation layer sends, counted as the served model counts it: the harness vs an oracle.

    python benchmarks/bench_eval_templates.py [--tasks 50] [--longbench 10] [--seed 7] [--data ../shared/data]
                                              [--context-limit 16384] [--max-tokens 4096]

Needs ../shared/data/qwen3-tokenizer (Qwen3's tokenizer.json and chat template) and ``transformers`` (the dev
extra); the LongBench sample (../shared/data/longbench_v2_hard_sample) is optional. Prints, measured in one run:
for N random eval tasks (NIH tasks of random seeds, and up to ``--longbench`` items of the LongBench sample),
run by all six methods with the scripted agent in-process, counting with ``--tokenizer`` = the Qwen3
directory, in text mode and in tool-calling mode:
- per method, the calls sent, the largest |harness count - oracle| over them (must be 0), where the harness
  count is the run's counter (arc_eval.counting, the one counting seam: what the methods' budget checks and the
  backend's L_ctx - G_max check use) and the oracle is an independent render-and-encode of exactly what was
  sent, its messages and tools: vLLM's preprocessing written out in proofs_check.shared_data, transformers'
  own apply_chat_template (enable_thinking false), then transformers' tokenizer;
- for ARC, the largest |view tokens - oracle| (the core's own count of the view it sent) and the largest
  view in server tokens against K and L;
- per method, the largest prompt sent in server tokens against L = L_ctx - G_max, and the calls the harness
  refused as over L before sending them (a baseline's overflow).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arc_eval.loop import run_task  # noqa: E402
from arc_eval.methods import make_method, method_names  # noqa: E402
from arc_eval.execute import make_backend  # noqa: E402
from arc_eval.plan import default_max_steps, method_settings  # noqa: E402
from arc_eval.run_spec import RunSpec  # noqa: E402
from arc_eval.tasks.longbench import load_longbench  # noqa: E402
from arc_eval.tasks.nih import make_nih_tasks  # noqa: E402
from arc_eval.types import ChatReply, ChatRequest, ContextOverflow, Task  # noqa: E402
from arc_ref.errors import ArcError  # noqa: E402
from arc_ref.options import integer_parser  # noqa: E402
from proofs_check.shared_data import shared_data_dir, transformers_prompt  # noqa: E402


class Recording:
    """The run's backend, keeping every request sent with the harness's count of it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.sent: list[tuple[ChatRequest, ChatReply]] = []
        self.refused = 0

    async def complete(self, request: ChatRequest) -> ChatReply:
        try:
            reply: ChatReply = await self.inner.complete(request)
        except ContextOverflow:
            self.refused += 1
            raise
        self.sent.append((request, reply))
        return reply

    async def count_prompt_tokens(self, messages: Any, tools: Any = ()) -> int:
        return int(await self.inner.count_prompt_tokens(messages, tools))


def draw_tasks(rng: random.Random, count: int, longbench: int, data: Path) -> list[Task]:
    sample = data / "longbench_v2_hard_sample"
    items = load_longbench(str(sample)) if longbench and (sample / "data.json").is_file() else []
    picked = rng.sample(items, min(longbench, len(items), count))
    nih = [make_nih_tasks(rng.randrange(10**6), 1)[0] for _ in range(count - len(picked))]
    return nih + picked


def oracle(directory: Path, request: ChatRequest) -> int:
    listing = [tool.openai() for tool in request.tools] or None
    return transformers_prompt(directory, [m.as_json() for m in request.messages], listing, enable_thinking=False)[1]


def run_specs(mode: str, directory: Path, context_limit: int, max_tokens: int) -> dict[str, RunSpec]:
    """The runs' specs, one per task kind, validated (a ConfigError names a refused setting)."""
    specs = {kind: RunSpec.build(task_kind=kind, methods=method_names(), seeds=(0,), out=Path("unused"),
                                 tasks_per_seed=1, tokenizer=str(directory), tool_calling=mode == "tools",
                                 context_limit=context_limit, max_tokens=max_tokens, rag_retriever="bm25")
             for kind in ("nih", "longbench")}
    specs["nih"].validate()
    return specs


def measure(mode: str, tasks: list[Task], directory: Path, context_limit: int, max_tokens: int) -> list[str]:
    limit = context_limit - max_tokens
    specs = run_specs(mode, directory, context_limit, max_tokens)
    counter = specs["nih"].prompt_counting().counter()  # one counter for the whole measurement, as a run has
    rows = []
    worst_view, largest_view, budget = 0, 0, 0
    started = time.perf_counter()
    for name in method_names():
        calls = worst = largest = refused = 0
        for number, task in enumerate(tasks):
            spec = specs[task.kind]
            settings = method_settings(spec, counter)
            backend = Recording(make_backend(spec, counter))
            method = make_method(name, settings)
            views: list[int] = []
            if name == "arc":
                original = method.prompt

                async def prompt(aux: Any, original: Any = original, method: Any = method, views: Any = views) -> Any:
                    messages = await original(aux)
                    views.append(method.prompt_tokens())
                    budget_seen.append(method.arc.setup.budget)
                    return messages

                budget_seen: list[int] = []
                method.prompt = prompt
            asyncio.run(run_task(task, method, backend, settings=settings, max_steps=default_max_steps(task),
                                 seed=number))
            agent_counts = []
            for request, reply in backend.sent:
                exact = oracle(directory, request)
                calls += 1
                worst = max(worst, abs(reply.prompt_tokens - exact))
                largest = max(largest, exact)
                if request.tags.get("purpose") == "agent":
                    agent_counts.append(exact)
            refused += backend.refused
            if name == "arc":
                worst_view = max([worst_view, *(abs(v - e) for v, e in zip(views, agent_counts, strict=True))])
                largest_view = max([largest_view, *agent_counts])
                budget = max([budget, *budget_seen])
        rows.append(f"  {name:<17} {calls:6d} calls  max |harness - oracle| {worst}  largest prompt {largest:6d}"
                    f" / L {limit}  refused over L before sending: {refused}")
    rows.append(f"  arc: max |view tokens - oracle| {worst_view}; largest view {largest_view} <= K {budget}"
                f" <= L {limit}: {largest_view <= budget <= limit}")
    rows.append(f"  ({time.perf_counter() - started:.0f} s)")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=integer_parser(1, 100_000), default=50, help="1 to 100000")
    parser.add_argument("--longbench", type=integer_parser(0, 100_000), default=10,
                        help="LongBench sample items among the tasks (0 to 100000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=shared_data_dir())
    parser.add_argument("--context-limit", type=int, default=16384)
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    directory = (args.data / "qwen3-tokenizer").resolve()
    if not (directory / "tokenizer.json").is_file():
        print(f"needs the Qwen3 tokenizer directory at {directory}", file=sys.stderr)
        return 2
    try:
        for mode in ("text", "tools"):
            run_specs(mode, directory, args.context_limit, args.max_tokens)
    except ArcError as refused:
        parser.error(str(refused))
    tasks = draw_tasks(random.Random(args.seed), args.tasks, args.longbench, args.data)
    kinds = {kind: sum(task.kind == kind for task in tasks) for kind in ("nih", "longbench")}
    print(f"{len(tasks)} random eval tasks ({kinds['nih']} NIH of random seeds, {kinds['longbench']} LongBench "
          f"sample items; seed {args.seed}), six methods, scripted agent, counted with --tokenizer {directory} "
          f"(Qwen3's template, enable_thinking false); L_ctx {args.context_limit}, G_max {args.max_tokens}")
    for mode in ("text", "tools"):
        print(f"{mode} mode:")
        for row in measure(mode, tasks, directory, args.context_limit, args.max_tokens):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_eval_templates"))
