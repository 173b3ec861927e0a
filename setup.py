"""fairseq-syntax: syntax- and alignment-aware attention for NMT as a fairseq plugin."""
from setuptools import find_packages, setup

setup(
    name="fairseq-syntax",
    version="0.1.0",
    description=(
        "A fairseq plugin for syntax- and alignment-aware neural machine translation: "
        "syntax-directed, look-ahead, structured, tree-to-sequence and supervised attention."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["fairseq_syntax", "fairseq_syntax.*"])
    + ["fairseq_syntax_preprocess"],
    package_dir={"fairseq_syntax_preprocess": "preprocess"},
    install_requires=[
        # fairseq 0.12.2 does not import on Python >= 3.11; fairseq-fixed is the same package, fixed.
        "fairseq-fixed==0.12.3.1; python_version >= '3.11'",
        "fairseq==0.12.2; python_version < '3.11'",
        "torch>=2.6,<2.14",  # >= 2.6: checkpoints load with weights_only=True
        "numpy>=2.0,<3",  # np.bitwise_count (the collater's word distances)
        "sentencepiece>=0.1.99,<0.3",
        "sacrebleu>=2.3,<3",
        "networkx>=3.0,<4",
        "conllu>=4.5,<7",
        "spacy>=3.8,<3.9",
        "eflomal>=2.0,<3",  # --align eflomal
        "tqdm>=4.60",
        "matplotlib>=3.7,<4",  # heatmaps of look-ahead attention and syntax gates
    ],
    extras_require={
        # scipy: the Student-t quantiles a significance test checks the tables against;
        # pytest-xdist: README's test command runs the suite on 2 processes, a file each;
        # MeCab + IPAdic: the Japanese tokenisation and scoring tests (ja-mecab)
        "test": ["pytest>=7", "pytest-timeout>=2.1,<3", "pytest-xdist>=3.5,<4",
                 "hypothesis>=6.80", "scipy>=1.10,<2", "mecab-python3>=1.0.9,<2",
                 "ipadic>=1.0,<2"],
        # Japanese (examples/kftt): MeCab + IPAdic is sacreBLEU's ja-mecab tokenizer and the
        # recipe's tokenisation (sacrebleu[ja]'s own ranges); ja_ginza parses Japanese sources
        "ja": ["mecab-python3>=1.0.9,<2", "ipadic>=1.0,<2", "ja-ginza==5.3.0"],
    },
    entry_points={
        "console_scripts": [
            "fairseq-syntax-preprocess = fairseq_syntax_preprocess.cli:main",
            "fairseq-syntax-synthetic = fairseq_syntax.cli.synthetic:main",
            "fairseq-syntax-score-agreement = fairseq_syntax.cli.score_agreement:main",
            "fairseq-syntax-user-dir = fairseq_syntax.user_dir:main",
            "fairseq-syntax-score-alignments = fairseq_syntax.cli.score_alignments:main",
            "fairseq-syntax-lookahead-heatmap = fairseq_syntax.cli.lookahead_heatmap:main",
            "fairseq-syntax-induced-trees = fairseq_syntax.cli.induced_trees:main",
            "fairseq-syntax-benchmark = fairseq_syntax.cli.benchmark:main",
            "fairseq-syntax-experiment = fairseq_syntax.cli.experiment:main",
            "fairseq-syntax-step-time = fairseq_syntax.cli.step_time:main",
            "fairseq-syntax-parity = fairseq_syntax.cli.parity:main",
            "fairseq-syntax-tokenize = fairseq_syntax.cli.tokenize:main",
            "fairseq-syntax-gpu-readiness = fairseq_syntax.cli.gpu_readiness:main",
        ],
    },
)
