# Real datasets and benchmarks of the paper world, turned into local JSONL in the common schema.
if not TOY:

    # Downloads from the Hugging Face Hub: runs where snakemake runs (login nodes usually have the
    # internet, compute nodes often not), never as a Slurm job.
    localrules:
        prepare_data,

    rule prepare_data:
        input:
            holdout_inputs,
        output:
            f"{RES}/data/{{dataset}}.jsonl",
        log:
            f"{RES}/logs/data/{{dataset}}.log",
        conda:
            CPU_ENV
        params:
            spec=dataset_spec,
        shell:
            "scout --log {log} prepare-data --spec {params.spec:q} --out {output}"
