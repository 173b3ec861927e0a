"""``fairseq-syntax-synthetic``: write the synthetic en->vf corpus to a folder."""
import argparse
from typing import List, Optional

from fairseq_syntax.data.synthetic_corpus import GEN_SPLIT, SPLITS, generate_corpus


def main(argv: Optional[List[str]] = None) -> int:
    """``fairseq-syntax-synthetic``: write the synthetic corpus to a directory."""
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-synthetic",
        description="Generate the synthetic en->vf corpus (text, gold CoNLL-U dependency "
        "trees, gold PTB-style bracketed constituency trees, gold Pharaoh alignments) for "
        "train/valid/test and the harder gen split.",
    )
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--train", type=int, default=20000,
                        help="number of training pairs (default: 20000)")
    parser.add_argument("--valid", type=int, default=500,
                        help="number of validation pairs (default: 500)")
    parser.add_argument("--test", type=int, default=500,
                        help="number of test pairs (default: 500)")
    parser.add_argument("--gen", type=int, default=500,
                        help="number of generalisation pairs, gen.*: deeper nesting, more "
                        "attractors, longer than any training sentence; seed + 1000003 "
                        "(default: 500; 0 writes no gen files)")
    args = parser.parse_args(argv)
    for name in (*SPLITS, GEN_SPLIT):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be >= 0")
    summary = generate_corpus(args.out, args.seed, args.train, args.valid, args.test, args.gen)
    sizes = summary["sizes"]
    print(f"wrote {sizes['train']}/{sizes['valid']}/{sizes['test']} train/valid/test pairs "
          f"and {args.gen} gen pairs (.en .vf .en.conllu .en.ptb .align) to {args.out} "
          f"(seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
