# Assemble the report (REPORT.html, self-contained, and REPORT.pdf: report/report.* for the
# default config, report/<name>.* for the others) from the notebooks' output.


rule report:
    input:
        numbers=expand(
            results("numbers/{experiment}.json"), experiment=report_experiments()
        ),
        figures=expand(figures("{experiment}"), experiment=report_experiments()),
        benchmarks=benchmark_files,
        registry="src/rankcollapse/claims/claims.yaml",
        template="report/templates/report.html.j2",
        style="report/templates/report.css",
    output:
        html=f"{REPORT}.html",
        pdf=[
            report(
                path,
                caption="../../report/templates/captions/report.rst",
                category="Report",
            )
            for path in report_pdf()
        ],
    log:
        results("logs/report.log"),
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        title=config["report"]["title"],
        config=config,
    script:
        "../scripts/build_report.py"
