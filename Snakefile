# rankcollapse: why deep self-attention collapses and what prevents it.
# This file is the table of contents; each stage lives in workflow/rules/.
#   snakemake --cores N                                      (default config)
#   snakemake --cores N --configfile workflow/config/ci.yaml (tiny)


configfile: "workflow/config/default.yaml"


# Description at the top of `snakemake --report report/snakemake-report.html`.
report: "report/templates/captions/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/init.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/paths.smk"
include: "workflow/rules/circle.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/particles.smk"
include: "workflow/rules/realarch.smk"
include: "workflow/rules/notebooks.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        f"{REPORT}.html",
        report_pdf(),
