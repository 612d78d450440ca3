# E1b: BERT, ALBERT and XLNet at random initialisation with their path ablations (Dong et al.,
# Fig. 2); one job per model runs all its seeds (importing transformers and starting Python
# once), every ablation and layer from captured forward passes.


rule realarch:
    output:
        results("realarch/{model}.parquet"),
    log:
        results("logs/realarch/{model}.log"),
    benchmark:
        results("benchmarks/realarch/{model}.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        settings=config["realarch"],
    script:
        "../scripts/realarch.py"


rule collect_realarch:
    input:
        realarch_tables,
    output:
        table("E1b", "realarch"),
    log:
        results("logs/collect/E1b_realarch.log"),
    benchmark:
        results("benchmarks/collect/E1b_realarch.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
