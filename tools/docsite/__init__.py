"""The documentation site's generators (``mkdocs.yml`` ``hooks:``): reference pages made from the code.

:mod:`tools.docsite.hooks` is the MkDocs entry; :mod:`tools.docsite.reference` renders the CLI, the
spec format, the task environment, ``summary.json`` and the backend table; :mod:`tools.docsite.bench`
renders the benchmark tables and the recovery timeline from ``bench/results/*.json``.
"""
