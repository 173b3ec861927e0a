"""``fairseq-syntax-user-dir``: print the folder to pass to ``--user-dir``.

fairseq's ``--user-dir`` takes a filesystem path. Installed with pip, the plugin lives
in site-packages, so use ``--user-dir "$(fairseq-syntax-user-dir)"``.
"""
import os
import sys


def user_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return
    print(user_dir())


if __name__ == "__main__":
    main()
