# E6: random multi-head attention on the sphere [KGR26]. One job per point of a study (a point
# batches a whole grid: rankcollapse.homogenized_plan.plan), then one job that collects a table per
# group of studies.


rule particles:
    output:
        RESULTS + "/particles/{study}/{point}.parquet",
    log:
        RESULTS + "/logs/particles/{study}/{point}.log",
    benchmark:
        RESULTS + "/benchmarks/particles/{study}/{point}.tsv"
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
        **{table: f"{RESULTS}/tables/E6_{table}.parquet" for table in PARTICLE_TABLES},
    log:
        RESULTS + "/logs/collect/E6.log",
    benchmark:
        RESULTS + "/benchmarks/collect/E6.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
