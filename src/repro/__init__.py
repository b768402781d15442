"""repro: reproducible artifact evaluation for GPU-systems and DL-systems papers.

Three layers, lowest first (the import contracts in pyproject.toml hold them):
- the spine, this package's top-level modules: what papers use to run and record an experiment
  (``experiment``, ``records``, ``figures``, ``timing``, ``kernels``, ``search``, ``sweep``,
  ``tuning``, ``machine``, ``layout``...);
- the shared libraries: ``data``, ``models``, ``train``, ``sim``, ``multigpu``, and ``split`` on top of
  them (device-edge split inference: it builds on models, train and sim);
- ``papers``: one package per paper, above both, never importing one another.
Beside the papers, never imported by them: ``pipeline`` (the drivers that run experiments and keep
their records) and ``report`` (the claims report).
"""

__version__ = "0.1.0"
