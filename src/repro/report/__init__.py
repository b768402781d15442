"""The claims report: ``claims`` (the ledger and its verdicts), ``pages`` (claims.csv, report.md,
report.html), the pages' ``content``, ``html_page``, ``markdown_page`` and ``chart``, ``artifact``
(what an artifact committee checks) and ``browser`` (a screenshot). ``python -m repro.report``
builds it. The report imports ``claims``, never the reverse, and no paper imports the report."""
