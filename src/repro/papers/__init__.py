"""The papers: one package per paper (``repro.papers.<paper>``), each importing the spine and the
shared libraries and never another paper (the import contracts in pyproject.toml). Each owns
``config/experiment/<paper>/``, ``config/claims/<paper>.yaml``, ``tests/<paper>/``,
``docs/papers/<paper>.md`` and, only where it has rules of its own, ``workflow/rules/<paper>.smk``
(docs/adding-a-paper.md)."""
