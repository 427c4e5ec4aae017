# Training: one job per cell (setting x variant x seed), plus teacher preparation.


rule prepare_teacher:
    input:
        teacher_inputs,
    output:
        f"{RES}/teachers/{{model}}/train.json",
    params:
        spec=teacher_spec,
        out=f"{RES}/teachers/{{model}}",
        launch=launcher("prepare_teacher"),
    log:
        f"{RES}/logs/teachers/{{model}}.log",
    threads: cluster_threads("prepare_teacher")
    resources:
        **cluster_resources("prepare_teacher"),
    shell:
        "{params.launch} scout train --spec {params.spec:q} --out {params.out} > {log} 2>&1"


rule train:
    input:
        train_inputs,
    output:
        f"{RES}/train/{{setting}}/{{variant}}/s{{seed}}/train.json",
    params:
        spec=train_spec,
        out=f"{RES}/train/{{setting}}/{{variant}}/s{{seed}}",
        launch=launcher("train"),
    log:
        f"{RES}/logs/train/{{setting}}/{{variant}}/s{{seed}}.log",
    threads: cluster_threads("train")
    resources:
        **cluster_resources("train"),
    shell:
        "{params.launch} scout train --spec {params.spec:q} --out {params.out} > {log} 2>&1"
