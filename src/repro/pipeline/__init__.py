"""The pipeline's drivers: what runs an experiment and keeps its results, apart from what papers
import. ``run`` (one experiment: ``python -m repro.pipeline.run experiment=<paper>/<name>``),
``scale`` and ``gpu_slots`` (where and how big it runs), ``provenance`` (what made a record),
``reference`` (the committed GPU runs), ``tracking`` (MLflow) and ``watchdog`` (orphaned jobs).
No paper imports these."""
