# Helpers of notebooks.smk: its input functions, parameters and benchmark records.


def notebook_inputs(wildcards):
    spec = EXPERIMENTS[wildcards.experiment]
    return {"notebook": spec["notebook"], **spec["tables"]}


def notebook_params(wildcards):
    """Papermill parameters: JSON-serialisable values only."""
    spec = EXPERIMENTS[wildcards.experiment]
    return {
        "experiment": wildcards.experiment,
        "tables": spec["tables"],
        "settings": {key: config[key] for key in spec["settings"]},
    }
