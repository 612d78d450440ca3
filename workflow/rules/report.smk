# Assemble report/report.html (self-contained) and report/report.pdf from the notebooks' output.


rule report:
    input:
        numbers=expand(
            "results/numbers/{experiment}.json", experiment=report_experiments()
        ),
        figures=expand("report/figures/{experiment}", experiment=report_experiments()),
        benchmarks=benchmark_files,
        registry="workflow/claims.yaml",
        template="report/templates/report.html.j2",
        style="report/templates/report.css",
    output:
        html="report/report.html",
        pdf=[
            report(
                path,
                caption="../../report/templates/captions/report.rst",
                category="Report",
            )
            for path in report_pdf()
        ],
    log:
        "results/logs/report.log",
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        title=config["report"]["title"],
        config=config,
    script:
        "../scripts/build_report.py"
