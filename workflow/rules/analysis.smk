# Analysis: probes of the initial and the SCOUT-trained teacher on student and own responses
# (continuation accuracy by prefix ratio; entropy on own vs student responses; reflection after the
# student's right and wrong steps).


rule analysis:
    input:
        analysis_inputs,
    output:
        update(f"{RES}/analysis/{{setting}}/continuation.csv"),
        update(f"{RES}/analysis/{{setting}}/entropy.csv"),
        update(f"{RES}/analysis/{{setting}}/entropy_responses.csv"),
        update(f"{RES}/analysis/{{setting}}/continuation_items.csv"),
        update(f"{RES}/analysis/{{setting}}/reflection.csv"),
    log:
        f"{RES}/logs/analysis/{{setting}}.log",
    benchmark:
        f"{RES}/benchmarks/analysis/{{setting}}.tsv"
    priority: 1  # a long job the report waits for: ahead of the short evaluations
    conda:
        EVAL_ENV
    threads: cluster_threads("analysis")
    resources:
        **cluster_resources("analysis"),
    params:
        spec=analysis_spec,
        out=folder_of(),
    shell:
        "scout --log {log} analyze --spec {params.spec:q} --out {params.out}"
