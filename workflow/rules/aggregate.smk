# Aggregation: every evaluation record into per-run and per-method summary tables.


rule aggregate:
    input:
        eval_records,
    output:
        [update(f) for f in summary_files()],  # kept in place, and restored if the job fails
    params:
        spec=config_spec(),
        out=folder_of(),
    log:
        f"{RES}/logs/aggregate.log",
    conda:
        CPU_ENV
    shell:
        "scout --log {log} aggregate --spec {params.spec:q} --out {params.out}"
