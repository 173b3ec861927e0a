# On the lent GPU machine, first in every call (`source examples/device/setup.sh`): install
# the wheels of .whl/ (carry.sh, carried) and this checkout into /tmp beside the
# image's own python3 (its torch and CUDA stay), and put their commands on PATH.
# The wheels are installed once per machine; the checkout every call, as it travelled.
SITE=/tmp/fairseq-syntax-site
if [ ! -f "$SITE/wheels/.installed" ]; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "setup.sh: no .whl/*.whl here: run examples/device/carry.sh here and carry .whl" >&2
    return 2 2>/dev/null || exit 2
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE/wheels" .whl/*.whl && touch "$SITE/wheels/.installed"
fi
rm -rf "$SITE/project"
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
  --no-cache-dir --target "$SITE/project" .
export PYTHONPATH="$SITE/project:$SITE/wheels${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/project/bin:$SITE/wheels/bin:$PATH"
python3 -c "import torch, fairseq, fairseq_syntax, sacrebleu
print('python', __import__('platform').python_version(), '| torch', torch.__version__,
      '| fairseq', fairseq.__version__, '| sacrebleu', sacrebleu.__version__, '| device',
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
