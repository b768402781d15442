"""The papers: one package per paper (``repro.papers.<paper>``), each importing the spine and the
shared libraries and never another paper (the import contracts in pyproject.toml). Each owns
``config/experiment/<paper>/``, ``config/claims/<paper>.yaml``, ``workflow/rules/<paper>.smk``,
``tests/<paper>/`` and ``docs/papers/<paper>.md`` (docs/adding-a-paper.md)."""
