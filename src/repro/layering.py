"""The import contract of docs/adding-a-paper.md as an import-linter contract type, so that it holds
for every paper without naming one: papers (the repro subpackages that are not shared libraries,
repro.layout.papers) import the spine and the shared libraries and never one another; the spine and
the shared libraries import no paper. ``lint-imports`` (configured in pyproject.toml) and
tests/test_layering.py run it. Imported only by import-linter (a development dependency).
"""

from __future__ import annotations

from grimp import Layer
from importlinter.application import output
from importlinter.contracts._common import build_detailed_chain_from_route, render_chain_data
from importlinter.domain.contract import Contract, ContractCheck

from repro import layout


class PapersContract(Contract):
    type_name = "papers"

    def check(self, graph, verbose: bool) -> ContractCheck:
        papers = {f"repro.{p}" for p in layout.papers()}
        below = sorted(m for m in graph.find_children("repro") if m not in papers)
        dependencies = graph.find_illegal_dependencies_for_layers(
            layers=(Layer(*sorted(papers), independent=True), Layer(*below, independent=False)))
        chains = [{"importer": d.importer, "imported": d.imported,
                   "chains": [build_detailed_chain_from_route(c, graph) for c in d.routes]}
                  for d in sorted(dependencies, key=lambda d: (d.importer, d.imported))]
        return ContractCheck(kept=not dependencies, warnings=[], metadata={"invalid_chains": chains,
                                                                           "papers": sorted(papers)})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for broken in check.metadata["invalid_chains"]:
            output.print(f"{broken['importer']} is not allowed to import {broken['imported']}:")
            output.new_line()
            for chain in broken["chains"]:
                render_chain_data(chain)
                output.new_line()
        output.print("A paper imports the spine and the shared libraries only; move what two papers share into "
                     "a shared library (docs/adding-a-paper.md).")
