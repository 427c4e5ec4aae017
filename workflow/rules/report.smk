# Report: every table and figure of the paper plus one PDF, rendered from the results cache, and
# the summary CSVs of the same records (results/summary/: per run, per method, each run's behaviour).
# A selection's (config select) go to a folder of their own beneath both (scout.paths.Paths.report_dir).
#   snakemake report   renders from whatever is cached, every time it is asked for: it has no
#                      inputs and no outputs in the DAG, so it never trains or evaluates anything
#   snakemake          (the default target) renders the same report once the whole grid is done


localrules:
    report,
    grid_report,


rule report:
    log:
        f"{RES}/logs/report.log",
    conda:
        CPU_ENV
    params:
        spec=config_spec(),
        out=REPORT,
    shell:
        "scout --log {log} report --spec {params.spec:q} --out {params.out}"


rule grid_report:
    input:
        report_inputs,
    output:
        # update: the report stays in place while it is rendered again, and comes back if that fails
        [update(f) for f in report_files()],
        [update(f) for f in summary_files()],
        report(update(f"{REPORT}/index.html"), caption="../report/claims.rst", category="Report"),
        report(
            update(directory(f"{REPORT}/figures")),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
        report(
            update(directory(f"{REPORT}/tables")),
            patterns=["{name}.tex"],
            caption="../report/tables.rst",
            category="Tables",
        ),
    log:
        f"{RES}/logs/grid_report.log",
    conda:
        CPU_ENV
    params:
        spec=config_spec(),
        out=folder_of(),
    shell:
        "scout --log {log} report --spec {params.spec:q} --out {params.out}"
