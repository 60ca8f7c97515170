"""A real server's prefix cache next to the model's figure: the five trajectories' requests, every method, on vLLM.

    python benchmarks/vllm_cpu/prefix_cache.py --vllm-python VENV/bin/python --work DIR
                                               [--windows 16k,32k] [--trajectories NAME,...] [--check]

Every request that ``benchmarks/bench_trajectories.py`` serves (Qwen3 counting: the served model's own template and
tokenizer; agent calls and the baselines' condensing calls alike) is sent, in order, to a real vLLM server of the
tiny random Qwen3 (make_tiny_qwen3.py: Qwen3's real tokenizer and chat template) with automatic prefix caching on
and ``--enable-prompt-tokens-details``, with ``max_tokens`` 1 and a ``cache_salt`` per (window, trajectory,
method), so that a task's requests share cached blocks only with each other, as on a server serving that task
alone. Per request the script reads ``usage.prompt_tokens`` and ``usage.prompt_tokens_details.cached_tokens``;
per task the deltas of the ``/metrics`` counters ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits``.
It prints them next to the model's figures (the bench's count and its common prefix with the previous prompt):

* ``prompt``: the model's count, and ``= usage`` when every request's ``usage.prompt_tokens`` is the same;
* ``cached``: the model's cached tokens (sum), vLLM's ``cached_tokens`` (sum) and the /metrics hits (delta);
* ``gap``: model - vLLM per request: vLLM caches whole blocks of ``block_size`` tokens (128 on the CPU backend
  by default) and always computes a prompt's last token, so the model's figure rounded down to a block is what a
  block cache can serve; the largest gap and how many requests differ by a block or more are printed.

``--check`` (CI, bounded): one trajectory (SWE-agent with function calling, 12 calls) at 16k, every method, on an
8,192-token server; it exits 1 unless every request's usage equals the model's count and every gap is within
[0, block_size) (vLLM serving more than the previous prompt shares would show as a negative gap). The full run
takes about 10 minutes on two CPU cores. Needs the shared data (trajectories, the Qwen3 tokenizer).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from real_vllm import SERVED, VllmServer  # noqa: E402
from benchmarks.servers import SERVERS, run as run_stopping  # noqa: E402  (real_vllm put the repository on the path)
import bench_trajectories as bench  # noqa: E402
from trajectories import DATA_DIR, load_all  # noqa: E402

from arc_eval.counting import make_counter  # noqa: E402
from arc_eval.methods import method_names  # noqa: E402
from arc_eval.types import Message  # noqa: E402

CHECK_TRAJECTORY = "sweagent_function_calling"
METRICS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")


class Server(VllmServer):
    """vLLM's OpenAI server of one model (real_vllm.VllmServer), prefix caching and prompt token details on."""

    def __init__(self, python: str, model: Path, window: int, log: Path, start_timeout_s: float) -> None:
        super().__init__(python, model, log, start_timeout_s, window=window,
                         flags=("--enable-prefix-caching", "--enable-prompt-tokens-details"), kv_cache_gib=2)
        self.base = self.root
        self.block_size = block_size(log)
        print(f"vLLM block size {self.block_size}", flush=True)
        self.client = httpx.Client(timeout=600)

    def metrics(self) -> dict[str, float]:
        text = self.client.get(f"{self.base}/metrics").text
        found = {}
        for name in METRICS:
            values = [float(match) for match in re.findall(rf"^{re.escape(name)}_total(?:{{[^}}]*}})? (\S+)$", text,
                                                           re.MULTILINE)]
            found[name] = sum(values)
        return found

    def complete(self, messages: Sequence[Message], salt: str) -> dict[str, Any]:
        payload = {"model": SERVED, "messages": [{"role": m.role, "content": m.content} for m in messages],
                   "max_tokens": 1, "temperature": 0, "cache_salt": salt,
                   "chat_template_kwargs": {"enable_thinking": False}}
        response = self.client.post(f"{self.base}/v1/chat/completions", json=payload)
        if response.status_code != 200:
            raise RuntimeError(f"vLLM answered {response.status_code}: {response.text[:300]}")
        usage: dict[str, Any] = response.json()["usage"]
        return usage

def block_size(log: Path) -> int:
    """The KV cache block size vLLM chose, as its start-up log states it (128 on the CPU backend by default)."""
    match = re.search(r"block_size=(\d+)", log.read_text(errors="replace"))
    return int(match.group(1)) if match else 128


def run(server: Server, windows: Sequence[str], names: Sequence[str] | None, check: bool) -> bool:
    counter = make_counter(f"hf-dir:{bench.QWEN3_DIR}", "template")
    trajectories = [t for t in load_all(DATA_DIR) if names is None or any(t.name.startswith(n) for n in names)]
    block = server.block_size
    ok = True
    print(f"{'window':<6} {'trajectory':<28} {'method':<8} {'reqs':>5} {'prompt':>10} {'=usage':>6}"
          f" {'model cached':>12} {'vLLM cached':>11} {'/metrics hits':>13} {'max gap':>7} {'>=block':>7}"
          f" {'<0':>4}")
    totals: dict[str, list[int]] = {}
    for window in windows:
        for trajectory in trajectories:
            for name in method_names():
                rows: list[tuple[int, int, int, int]] = []  # (model prompt, usage prompt, model cached, vLLM cached)
                salt = f"{window}-{trajectory.name}-{name}"
                before = server.metrics()

                def sink(method: str, messages: Sequence[Message], tokens: int, cached: int) -> None:
                    usage = server.complete(messages, salt)
                    details = usage.get("prompt_tokens_details") or {}
                    rows.append((tokens, int(usage["prompt_tokens"]), cached, int(details.get("cached_tokens") or 0)))

                bench.replay(name, trajectory, window, counter, sink=sink)
                after = server.metrics()
                hits = after["vllm:prefix_cache_hits"] - before["vllm:prefix_cache_hits"]
                gaps = [model - served for _, _, model, served in rows]
                same = all(model == usage for model, usage, _, _ in rows)
                wide = sum(1 for gap in gaps if gap >= block)
                negative = sum(1 for gap in gaps if gap < 0)
                ok &= same and (not check or (wide == 0 and negative == 0))
                model_cached, vllm_cached = sum(r[2] for r in rows), sum(r[3] for r in rows)
                total = totals.setdefault(f"{window} {name}", [0, 0, 0, 0])
                for index, value in enumerate((sum(r[0] for r in rows), model_cached, vllm_cached, int(hits))):
                    total[index] += value
                print(f"{window:<6} {trajectory.name[:28]:<28} {bench.SHORT[name]:<8} {len(rows):>5}"
                      f" {sum(r[0] for r in rows):>10,} {'yes' if same else 'NO':>6} {model_cached:>12,}"
                      f" {vllm_cached:>11,} {int(hits):>13,} {max(gaps, default=0):>7} {wide:>7} {negative:>4}",
                      flush=True)
    print(f"\n{'totals':<36} {'prompt':>10} {'model cached':>12} {'vLLM cached':>11} {'/metrics hits':>13}"
          f" {'vLLM/model':>10}")
    for key, (prompt, model_cached, vllm_cached, hits) in totals.items():
        ratio = vllm_cached / model_cached if model_cached else 1.0
        print(f"{key:<36} {prompt:>10,} {model_cached:>12,} {vllm_cached:>11,} {hits:>13,} {ratio:>10.4f}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--vllm-python", required=True, help="the Python of the environment vLLM is installed in")
    parser.add_argument("--work", type=Path, required=True, help="a directory for the model and the server's log")
    parser.add_argument("--windows", type=bench.comma_choices(tuple(bench.WINDOWS)), default="16k,32k",
                        help=f"comma-separated: {', '.join(bench.WINDOWS)}")
    parser.add_argument("--trajectories", default=None, help="names (prefixes) of the trajectories; default all five")
    parser.add_argument("--check", action="store_true", help="the bounded CI check (see the module docstring)")
    parser.add_argument("--start-timeout", type=float, default=900)
    args = parser.parse_args(argv)
    if shutil.which(args.vllm_python) is None:
        parser.error(f"--vllm-python {args.vllm_python!r} is not an interpreter that can be run")
    if not (bench.QWEN3_DIR / "tokenizer.json").is_file() or not DATA_DIR.is_dir():
        print(f"skipped: needs {DATA_DIR} and {bench.QWEN3_DIR}")
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / "tiny-qwen3-random"
    if not (model / "config.json").is_file():
        subprocess.run([args.vllm_python, str(HERE / "make_tiny_qwen3.py"), str(model)], check=True, timeout=600)
    windows = ["16k"] if args.check else args.windows
    names = [CHECK_TRAJECTORY] if args.check else (args.trajectories.split(",") if args.trajectories else None)
    server_window = 8192 if args.check else max(bench.WINDOWS[window] for window in windows)
    started = time.monotonic()
    server = Server(args.vllm_python, model, server_window, args.work / "vllm-prefix-cache.log", args.start_timeout)
    try:
        ok = run(server, windows, names, args.check)
    finally:
        server.stop()
    print(f"prefix cache: {'ok' if ok else 'FAILED'} in {(time.monotonic() - started) / 60:.1f} min")
    return 0 if ok else 1


if __name__ == "__main__":
    # run.sh's timeout sends SIGTERM (a closed terminal SIGHUP): the server is stopped, the status 128 + the signal
    SERVERS.stop_on_signals()
    sys.exit(run_stopping(main, "prefix_cache"))
