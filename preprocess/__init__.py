"""fairseq-syntax-preprocess: parallel text + parses + alignments -> data-bin with syntax side-files."""
