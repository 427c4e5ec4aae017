# Aggregation: every evaluation record into per-run and per-method summary tables.


rule aggregate:
    input:
        eval_records(),
    output:
        summary_files(),
    params:
        out=folder_of(),
    log:
        f"{RES}/logs/aggregate.log",
    conda:
        CPU_ENV
    shell:
        "scout aggregate --out {params.out} {input} > {log} 2>&1"
