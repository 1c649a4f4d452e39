#!/usr/bin/env bash
# Sets up everything solo-bayesncl needs, and says what it does while it does it. Idempotent: a
# second call reuses what the first installed.
#
#   scripts/setup.sh            # the environment to train, evaluate and benchmark
#   scripts/setup.sh --tests    # and what the tests need (pytest, ruff, DALI, Chromium)
#
# Environment:
#   VENV             the virtual environment to create or reuse (default .venv; empty: install
#                    into the interpreter given by PYTHON itself). The venv sees the system's
#                    packages, so a torch already installed there is reused, not downloaded again.
#   PYTHON           the interpreter that creates the venv (default python3; 3.10 or newer).
#   REQUIRE_SOLO_LEARN=1  fail when solo-learn could not be installed (CI: every test runs inside
#                    its host), instead of going on without it.
#   SOLO_LEARN_SRC   a local solo-learn to install instead of the pinned GitHub commit: a source
#                    tree (a clone at that commit), or a wheel built from it
#                    (solo_learn-1.0.6-py3-none-any.whl).
#
# `make setup`, `make test` and `make benchmark` call this script; so does the CI script.
set -euo pipefail
cd "$(dirname "$0")/.."

SOLO_LEARN_COMMIT=9187ea39c2c3f43c455ab06664d2b019a9802954
SOLO_LEARN_VERSION=1.0.6
# the wheel `pip wheel --no-deps` builds from that commit (setuptools < 81), for machines that
# cannot reach GitHub
SOLO_LEARN_WHEEL_SHA256=10cba871cdc24fdfa947849bf98f04652e0f6b15f908b0a2d9e2486a78ac8212
TORCH=2.14.1
TORCHVISION=0.29.1
TESTS=0
[ "${1:-}" = "--tests" ] && TESTS=1

say() { echo "== setup: $*"; }

# a SOLO_LEARN_SRC that is not solo-learn would install something else (or nothing) and end "done"
if [ -n "${SOLO_LEARN_SRC:-}" ]; then
  if [ -f "$SOLO_LEARN_SRC" ]; then
    case "$(basename "$SOLO_LEARN_SRC")" in
      solo_learn-"$SOLO_LEARN_VERSION"-*.whl) ;;
      *) say "SOLO_LEARN_SRC=$SOLO_LEARN_SRC is a file but not a solo-learn $SOLO_LEARN_VERSION" \
           "wheel (solo_learn-$SOLO_LEARN_VERSION-py3-none-any.whl); give that wheel or a" \
           "solo-learn source tree, or unset it" >&2
         exit 2 ;;
    esac
  elif ! { [ -f "$SOLO_LEARN_SRC/solo/__init__.py" ] \
      && { [ -f "$SOLO_LEARN_SRC/setup.py" ] || [ -f "$SOLO_LEARN_SRC/pyproject.toml" ]; }; }; then
    say "SOLO_LEARN_SRC=$SOLO_LEARN_SRC is neither a solo-learn wheel nor a solo-learn checkout" \
      "(no solo/__init__.py beside a setup.py or pyproject.toml); point it at a clone of" \
      "https://github.com/vturrisi/solo-learn or a wheel built from one, or unset it" >&2
    exit 2
  fi
fi

VENV=${VENV-.venv}
if [ -n "$VENV" ]; then
  if [ -x "$VENV/bin/python" ]; then
    say "reusing the virtual environment $VENV"
  else
    say "creating the virtual environment $VENV (it sees the system's packages)"
    "${PYTHON:-python3}" -m venv --system-site-packages "$VENV"
  fi
  PY="$VENV/bin/python"
else
  PY=${PYTHON:-python3}
  say "installing into $PY itself (VENV is empty)"
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10 or newer is needed"'

# Debian packages: the offline Fashion-MNIST of the default runs; Chromium for the dashboard tests.
packages=(dataset-fashion-mnist)
[ "$TESTS" = 1 ] && packages+=(chromium chromium-driver)
missing=()
for pkg in "${packages[@]}"; do
  command -v dpkg >/dev/null && dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ! command -v dpkg >/dev/null; then
  say "not a Debian system: Fashion-MNIST is read from /usr/share/datasets/fashion-mnist (the" \
    "files of Debian's dataset-fashion-mnist); without them its runs and tests are skipped"
elif [ ${#missing[@]} -eq 0 ]; then
  say "Debian packages present (${packages[*]})"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  say "not installed: ${missing[*]} (run: sudo apt-get install ${missing[*]}); the offline" \
    "Fashion-MNIST runs and the tests that need them are skipped until then"
fi

pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

if "$PY" -c "import setuptools, wheel; assert int(setuptools.__version__.split('.')[0]) < 81" \
    2>/dev/null; then
  say "pip tooling present (setuptools < 81, wheel)"
else
  say "installing pip tooling (setuptools < 81: solo-learn's build imports pkg_resources)"
  pip_install --upgrade "pip>=25" "setuptools<81" wheel
fi

if "$PY" -c "import torch, torchvision as tv; assert torch.__version__.startswith('$TORCH') \
    and tv.__version__.startswith('$TORCHVISION')" 2>/dev/null; then
  say "PyTorch $TORCH present ($("$PY" -c 'import torch; print(torch.__version__)'))"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  say "installing PyTorch $TORCH from PyPI: the CUDA build, since a GPU is present (~6 GB with" \
    "its NVIDIA libraries)"
  pip_install "torch==$TORCH" "torchvision==$TORCHVISION"
else
  say "installing PyTorch $TORCH for the CPU (no GPU found) from PyTorch's CPU wheel index: a" \
    "few hundred MB, where PyPI's Linux wheel is the ~6 GB CUDA build"
  # one try at PyTorch's own index: where it cannot be reached (a mirror of PyPI only), pip's
  # default of five retries per package would spend many minutes before the PyPI fallback
  timeout 900 "$PY" -m pip install -q --disable-pip-version-check --retries 0 --timeout 20 \
      --index-url https://download.pytorch.org/whl/cpu "torch==$TORCH" "torchvision==$TORCHVISION" \
    || { say "the CPU wheel index cannot be reached: installing PyTorch from PyPI instead, whose" \
           "Linux wheel is the CUDA build (~6 GB with its NVIDIA libraries; the summary below" \
           "says which build came)";
         pip_install "torch==$TORCH" "torchvision==$TORCHVISION"; }
fi

# Which PyTorch build is installed, and its size on disk: the torch package folder plus the
# NVIDIA libraries a CUDA build brings (site-packages/nvidia), measured, not assumed.
torch_build() {
  local lines
  lines=$("$PY" -c 'import os, torch
print(torch.__version__)
print(torch.version.cuda or "")
print(os.path.dirname(torch.__file__))
nvidia = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia")
if os.path.isdir(nvidia): print(nvidia)' 2>/dev/null) || { echo "not importable"; return; }
  local version cuda kb build
  local -a folders=()
  { read -r version; read -r cuda; while read -r f; do [ -n "$f" ] && folders+=("$f"); done; } \
    <<< "$lines"
  if [ -n "$cuda" ]; then build="CUDA $cuda build"; else build="CPU build"; fi
  kb=0
  [ ${#folders[@]} -gt 0 ] && kb=$(du -skc "${folders[@]}" 2>/dev/null | tail -n 1 | cut -f1)
  echo "$version, the $build, $(awk -v kb="${kb:-0}" 'BEGIN { if (kb >= 1048576)
    printf "%.1f GB", kb / 1048576; else printf "%d MB", kb / 1024 }') on disk"
}
torch_desc=$(torch_build)
say "PyTorch installed: $torch_desc"

if "$PY" -c "import importlib.metadata as m, solo; assert m.version('solo-learn') == '$SOLO_LEARN_VERSION'" \
    2>/dev/null; then
  say "solo-learn $SOLO_LEARN_VERSION present"
elif [ -f "${SOLO_LEARN_SRC:-}" ]; then
  digest=$(sha256sum "$SOLO_LEARN_SRC" | cut -d' ' -f1)
  if [ "$digest" = "$SOLO_LEARN_WHEEL_SHA256" ]; then
    say "installing solo-learn from the wheel $SOLO_LEARN_SRC (sha256 matches the pinned build)"
  else
    say "installing solo-learn from the wheel $SOLO_LEARN_SRC (sha256 $digest: a build of your" \
      "own, not the pinned $SOLO_LEARN_WHEEL_SHA256)"
  fi
  pip_install "$SOLO_LEARN_SRC"
elif [ -n "${SOLO_LEARN_SRC:-}" ]; then
  say "installing solo-learn from the source tree $SOLO_LEARN_SRC"
  pip_install --no-build-isolation "$SOLO_LEARN_SRC"
else
  say "installing solo-learn from GitHub at the pinned commit ${SOLO_LEARN_COMMIT:0:7} (180 s at most)"
  timeout 180 "$PY" -m pip install -q --disable-pip-version-check --no-build-isolation \
      "solo-learn @ git+https://github.com/vturrisi/solo-learn@${SOLO_LEARN_COMMIT}" \
    || say "solo-learn could not be installed (no access to GitHub?): set SOLO_LEARN_SRC to a" \
      "checkout of it; until then the commands exit with the install command and the tests" \
      "that need it are skipped"
fi

extras=""
[ "$TESTS" = 1 ] && extras="[test,dali]"
stamp="build/.setup-$(echo "$PY$extras" | cksum | cut -d' ' -f1)"
inputs=$(cksum < pyproject.toml)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ] \
    && "$PY" -c "import solo_bayesncl" 2>/dev/null; then
  say "solo-bayesncl present (editable install of this folder)"
else
  say "installing solo-bayesncl from this folder (editable)${extras:+ with $extras}"
  if [ "$TESTS" = 1 ]; then
    # the dali extra is NVIDIA DALI (~200 MB, its CPU operators need no GPU)
    pip_install --no-build-isolation -e ".[test,dali]" \
      || { say "the dali extra cannot be installed: the DALI tests will be skipped";
           pip_install --no-build-isolation -e ".[test]"; }
  else
    pip_install --no-build-isolation -e .
  fi
  mkdir -p build && echo "$inputs" > "$stamp"
fi
solo_learn=$("$PY" -c "import solo_bayesncl as s; print(s.SOLO_LEARN_AVAILABLE)")
if [ "${REQUIRE_SOLO_LEARN:-0}" = 1 ] && [ "$solo_learn" != True ]; then
  say "solo-learn is required (REQUIRE_SOLO_LEARN=1) but could not be installed: set" \
    "SOLO_LEARN_SRC to a solo-learn source tree or to its wheel (docs/install.md)" >&2
  exit 1
fi
say "done; PyTorch $torch_desc; solo-learn available: $solo_learn"
