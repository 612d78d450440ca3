"""Run one experiment notebook with papermill; it writes figures and the claims JSON."""

import logging

from rankcollapse import io, notebooks

io.log_to(snakemake.log[0])
parameters = {
    **snakemake.params.parameters,
    "figures_dir": snakemake.output.figures,
    "numbers_path": snakemake.output.numbers,
}
logging.info("running %s with %s", snakemake.input.notebook, parameters)
notebooks.run(snakemake.input.notebook, snakemake.output.executed, parameters)
