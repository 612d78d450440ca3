# Papermill runs one notebook per experiment on its collected tables: figures, tables and the
# claims. Notebooks never train or simulate, so editing one reruns only it and the report.


rule notebook:
    input:
        unpack(notebook_inputs),
    output:
        executed=results("notebooks/{experiment}.ipynb"),
        numbers=results("numbers/{experiment}.json"),
        figures=report(
            directory(figures("{experiment}")),
            patterns=["{name}.png"],
            caption="../../report/templates/captions/figure.rst",
            category="{experiment}",
        ),
    log:
        results("logs/notebooks/{experiment}.log"),
    benchmark:
        results("benchmarks/notebooks/{experiment}.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        parameters=notebook_params,
    script:
        "../scripts/run_notebook.py"
