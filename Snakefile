# rankcollapse: why deep self-attention collapses and what prevents it.
# This file is the table of contents; each stage lives in workflow/rules/.
#   snakemake --cores N                                      (default config)
#   snakemake --cores N --configfile workflow/config/ci.yaml (tiny)


configfile: "workflow/config/default.yaml"


# Description at the top of `snakemake --report report/snakemake-report.html`.
report: "report/templates/captions/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/e1_init_sweep.smk"
include: "workflow/rules/e1b_realarch.smk"
include: "workflow/rules/e2_paths.smk"
include: "workflow/rules/e3_circle.smk"
include: "workflow/rules/e4_escalation.smk"
include: "workflow/rules/e5_depth_grid.smk"
include: "workflow/rules/e6_particles.smk"
include: "workflow/rules/notebooks.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        f"{REPORT}.html",
        report_pdf(),
