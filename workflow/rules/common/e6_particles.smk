# Helpers of e6_particles.smk: its input functions, parameters and benchmark records.


# E6: collected table -> the studies it concatenates
PARTICLE_TABLES = homogenized_plan.TABLES


def particle_plan():
    """{study: {point: params}} of E6 (rankcollapse.plan.particles.plan)."""
    return homogenized_plan.plan(config["particles"], config["init_sweep"])


def particle_tables(wildcards=None):
    """{table: the per-point tables collected into E6's table of that name (its outputs)}."""
    plan = particle_plan()
    return {
        table: [
            results(f"particles/{study}/{point}.parquet")
            for study in studies
            for point in plan[study]
        ]
        for table, studies in PARTICLE_TABLES.items()
    }


def particle_params(wildcards):
    return particle_plan()[wildcards.study][wildcards.point]


def particle_benchmarks():
    return [
        results(f"benchmarks/particles/{study}/{point}.tsv")
        for study, points in particle_plan().items()
        for point in points
    ] + [results("benchmarks/collect/E6.tsv")]


for _table in outputs("E6").values():
    BENCHMARKS[_table] = particle_benchmarks
