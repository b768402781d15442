# repro: one DAG from dataset prep and kernel builds to the claims report.
#   snakemake --cores all                      everything, at the scale config/config.yaml picks
#   snakemake --cores all --config scale=smoke the tiny CPU scale
#   snakemake results/figures/tsm2_r.png       one figure and only what it needs
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/ceilings.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/baseline.smk"
include: "workflow/rules/tsm2x.smk"
include: "workflow/rules/clicktrain.smk"
include: "workflow/rules/superneurons.smk"
include: "workflow/rules/comet.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        rules.claims.output.report,
        rules.mlflow.output.summary,
    default_target: True
