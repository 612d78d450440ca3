# E6: random multi-head attention on the sphere [KGR26]. One job per point of a study (a point
# batches a whole grid: rankcollapse.plan.particles.plan), then one job that collects a table per
# group of studies.


rule particles:
    output:
        results("particles/{study}/{point}.parquet"),
    log:
        results("logs/particles/{study}/{point}.log"),
    benchmark:
        results("benchmarks/particles/{study}/{point}.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        point=particle_params,
    script:
        "../scripts/particles.py"


rule collect_particles:
    input:
        unpack(particle_tables),
    output:
        **outputs("E6"),
    log:
        results("logs/collect/E6.log"),
    benchmark:
        results("benchmarks/collect/E6.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
