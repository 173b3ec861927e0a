"""Small console commands of the plugin that fairseq's own command lines do not cover
(each module has a ``main(argv=None)``, installed as a ``fairseq-syntax-*`` console script)."""
