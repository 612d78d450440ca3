# Helpers of report.smk: its input functions, parameters and benchmark records.


def report_experiments():
    return config["report"]["experiments"]


def report_pdf():
    return [f"{REPORT}.pdf"] if config["report"]["pdf"] else []


def benchmark_files(wildcards=None):
    """The per-job wall-time records that the report's provenance section sums per rule: those
    of the jobs behind every table the report reads, then one per notebook."""
    tables = [results(t) for t in sorted(registry.needed_tables(config))]
    jobs = {path for table in tables for path in BENCHMARKS[table]()}
    notebooks = expand(
        results("benchmarks/notebooks/{experiment}.tsv"),
        experiment=report_experiments(),
    )
    return sorted(jobs) + notebooks
