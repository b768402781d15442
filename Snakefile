# repro: one DAG from dataset prep and kernel builds to the claims report.
#   snakemake --cores all                                 everything, at the scale config/config.yaml picks
#   snakemake --cores all --config scale=smoke            the tiny CPU scale
#   snakemake --cores all tsm2x                           one paper: its experiments, its figures, what they read
#   snakemake --cores all results/figures/tsm2x/tsm2_r.png   one figure and only what it needs
# The spine's rules run every paper's experiments; a paper with steps of its own has them in
# workflow/rules/<paper>.smk (docs/adding-a-paper.md).
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/experiment.smk"
include: "workflow/rules/report.smk"


for paper in layout.papers():
    if Path(workflow.basedir, "workflow", "rules", f"{paper}.smk").is_file():

        include: f"workflow/rules/{paper}.smk"


rule all:
    input:
        rules.claims.output.report,
        rules.mlflow.output.summary,
    default_target: True


# `snakemake <paper>`: every experiment of the paper (its records) and its figures, and only what
# they read besides (the data, cubins, another paper's record an experiment file declares).
for paper in layout.papers():
    if rules.has(paper):
        raise WorkflowError(f"rule {paper!r} has the name of the paper {paper!r}, which the Snakefile gives to the "
                            f"paper's target (`snakemake {paper}`): rename the rule (a paper's own rules are named "
                            f"<paper>_<step>, e.g. clicktrain_arm)")

    rule:
        name:
            paper
        input:
            records=expand(rules.experiment.output.record, experiment=experiments_of(paper)),
            figures=expand(rules.figure.output.png, experiment=[e for e in FIGURES if layout.split(e)[0] == paper]),
