# Training: one job per cell (setting x variant x seed), plus teacher preparation. Where the backend
# checks its cells (verl), a preflight of every cell (scout preflight) runs once, where snakemake
# runs, before the first job.
if BACKEND.checks_cells:

    localrules:
        preflight,

    rule preflight:
        input:
            training_data(),
        output:
            f"{RES}/preflight.json",
        log:
            f"{RES}/logs/preflight.log",
        conda:
            TRAIN_ENV
        params:
            spec=config_spec(),
        shell:
            "scout --log {log} preflight --spec {params.spec:q} --out {output}"


rule prepare_teacher:
    input:
        teacher_inputs,
        preflight_files(),
    output:
        f"{RES}/teachers/{{model}}/train.json",
    log:
        f"{RES}/logs/teachers/{{model}}.log",
    benchmark:
        f"{RES}/benchmarks/prepare_teacher/{{model}}.tsv"
    retries: job_retries("prepare_teacher")
    conda:
        TRAIN_ENV
    threads: cluster_threads("prepare_teacher")
    resources:
        **cluster_resources("prepare_teacher"),
    params:
        spec=teacher_spec,
        out=folder_of(),
        launch=launcher("prepare_teacher"),
    shell:
        "{params.launch} scout --log {log} train --spec {params.spec:q} --out {params.out}"


rule train:
    input:
        train_inputs,
        preflight_files(),
    output:
        f"{RES}/train/{{setting}}/{{variant}}/s{{seed}}/train.json",
    log:
        f"{RES}/logs/train/{{setting}}/{{variant}}/s{{seed}}.log",
    benchmark:
        f"{RES}/benchmarks/train/{{setting}}/{{variant}}/s{{seed}}.tsv"
    priority: train_priority
    retries: job_retries("train")
    conda:
        TRAIN_ENV
    threads: cluster_threads("train")
    resources:
        **cluster_resources("train"),
    params:
        spec=train_spec,
        out=folder_of(),
        launch=launcher("train"),
    shell:
        "{params.launch} scout --log {log} train --spec {params.spec:q} --out {params.out}"


# A served cell's gate (settings.*.teacher_server: serve; docs/cluster.md): on the submit host, with
# no GPU, it makes sure the teacher's server answers, launching it if none is up (scout.serving),
# before the cell is submitted. Planned exactly when its cell is; after the preflight, so that no
# server holds GPUs for cells it refuses, and waiting gates never keep it from the local jobs.
rule await_teacher:
    input:
        cell_inputs,
        preflight_files(),
    output:
        temp(f"{RES}/servers/{{model}}/await/{{setting}}/{{variant}}/s{{seed}}.json"),
    log:
        f"{RES}/logs/servers/{{model}}/await/{{setting}}/{{variant}}/s{{seed}}.log",
    localrule: True
    conda:
        GPU_ENV  # the server it launches runs vLLM in the same environment
    params:
        user=lambda wc: f"{RES}/train/{wc.setting}/{wc.variant}/s{wc.seed}/train.json",
    shell:
        "scout --log {log} await-teacher --setting {wildcards.setting} --user {params.user} --out {output}"
