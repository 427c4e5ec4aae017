# Training: one job per cell (setting x variant x seed), plus teacher preparation. On verl, a
# preflight of every cell (scout preflight) runs once, where snakemake runs, before the first job.
if config["backend"] == "verl":

    localrules:
        preflight,

    rule preflight:
        input:
            training_data(),
        output:
            f"{RES}/preflight.json",
        params:
            spec=config_spec(),
        log:
            f"{RES}/logs/preflight.log",
        conda:
            TRAIN_ENV
        shell:
            "scout --log {log} preflight --spec {params.spec:q} --out {output}"



rule prepare_teacher:
    input:
        teacher_inputs,
        preflight_files(),
    output:
        f"{RES}/teachers/{{model}}/train.json",
    params:
        spec=teacher_spec,
        out=folder_of(),
        launch=launcher("prepare_teacher"),
    log:
        f"{RES}/logs/teachers/{{model}}.log",
    benchmark:
        f"{RES}/benchmarks/prepare_teacher/{{model}}.tsv"
    threads: cluster_threads("prepare_teacher")
    resources:
        **cluster_resources("prepare_teacher"),
    conda:
        TRAIN_ENV
    shell:
        "{params.launch} scout --log {log} train --spec {params.spec:q} --out {params.out}"


rule train:
    input:
        train_inputs,
        preflight_files(),
    output:
        f"{RES}/train/{{setting}}/{{variant}}/s{{seed}}/train.json",
    params:
        spec=train_spec,
        out=folder_of(),
        launch=launcher("train"),
    log:
        f"{RES}/logs/train/{{setting}}/{{variant}}/s{{seed}}.log",
    benchmark:
        f"{RES}/benchmarks/train/{{setting}}/{{variant}}/s{{seed}}.tsv"
    priority: train_priority
    threads: cluster_threads("train")
    resources:
        **cluster_resources("train"),
    conda:
        TRAIN_ENV
    shell:
        "{params.launch} scout --log {log} train --spec {params.spec:q} --out {params.out}"


# A frozen teacher served once for the cells of its settings that only score with it
# (settings.*.teacher_server: serve; docs/cluster.md): it runs beside them, not before them, so
# they find it by the address file it writes and hold it by leases; it stops when they are done.
rule serve_teacher:
    input:
        server_inputs,
    output:
        temp(f"{RES}/servers/{{model}}/served.json"),
    params:
        spec=server_spec,
    log:
        f"{RES}/logs/servers/{{model}}.log",
    priority: 100
    threads: cluster_threads("teacher_server")
    resources:
        **cluster_resources("teacher_server"),
    conda:
        GPU_ENV  # vLLM
    shell:
        "scout --log {log} serve-teacher --spec {params.spec:q} --out {output}"
