# Report: every table and figure of the paper plus one PDF, rendered from the results cache.
#   snakemake report   renders from whatever is cached, every time it is asked for: it has no
#                      inputs and no outputs in the DAG, so it never trains or evaluates anything
#   snakemake          (the default target) renders the same report once the whole grid is done


localrules:
    aggregate,
    report,
    grid_report,


rule report:
    params:
        spec=as_json(config),
        out=f"{RES}/report",
    log:
        f"{RES}/logs/report.log",
    conda:
        CPU_ENV
    shell:
        "scout report --spec {params.spec:q} --out {params.out} > {log} 2>&1"


rule grid_report:
    input:
        summary_files(),
        analysis_files(),
    output:
        report_files(),
    params:
        spec=as_json(config),
        out=folder_of(),
    log:
        f"{RES}/logs/grid_report.log",
    conda:
        CPU_ENV
    shell:
        "scout report --spec {params.spec:q} --out {params.out} > {log} 2>&1"
