"""Assemble the report: report/report.{html,pdf}, or report/<name>.{html,pdf} for a named config."""

import logging

from rankcollapse import io, report

io.log_to(snakemake.log[0])
html = report.build(
    numbers=snakemake.input.numbers,
    benchmarks=snakemake.input.benchmarks,
    registry=snakemake.input.registry,
    template=snakemake.input.template,
    style=snakemake.input.style,
    title=snakemake.params.title,
    config=snakemake.params.config,
    html_path=snakemake.output.html,
    pdf_path=snakemake.output.pdf[0] if snakemake.output.pdf else None,
)
logging.info("wrote %s", snakemake.output)
